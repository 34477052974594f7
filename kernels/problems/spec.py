"""What a problem is, without torch: its dimensions, shape sets, tolerances, roofline and files.

The heavy halves of a problem (input generator, reference, baselines) live in its folder's
`reference.py` and `baselines.py` and are imported only inside the judge process."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernels import user_file
from kernels.evaluator.roofline import DeviceProfile, floor_seconds

PROBLEMS_DIR = Path(__file__).resolve().parent
PROBLEM_NAMES = ("mla_decode", "kda")


class ShapeError(ValueError):
    """A shape the problem does not accept (unknown name, missing dimension, out of range)."""


class ProblemFileError(ValueError):
    """A problem argument that names no problem, or a problem file that is not in the KernelBench format."""


@dataclass(frozen=True)
class Tolerance:
    """An output passes when ||o - ref|| / ||ref|| <= rel and max|o - ref| <= abs_frac * max|ref|."""
    rel: float
    abs_frac: float


@dataclass(frozen=True)
class Traffic:
    """The least a correct kernel must do: bytes through device memory, tensor-core and scalar FLOPs."""
    min_bytes: float
    tensor_flops: float
    scalar_flops: float = 0.0

    def floor_us(self, profile: DeviceProfile) -> float:
        return 1e6 * floor_seconds(self.min_bytes, self.tensor_flops, profile, self.scalar_flops)


class LazyBaseline:
    """A baseline built on its first call: an import or a compile that an evaluation reusing the
    baseline's figure (kernels/evaluator/baseline_cache.py) never pays for. A build that fails raises on that
    call, which the judge reports as a failed baseline."""

    def __init__(self, build: Callable[[], Callable]) -> None:
        self._build = build
        self._fn: Callable | None = None

    def __call__(self, **inputs):
        if self._fn is None:
            self._fn = self._build()
        return self._fn(**inputs)


@dataclass(frozen=True)
class ProblemSpec:
    name: str
    entry_point: str  # the function a candidate module must define
    dims: tuple[str, ...]  # shape names, in order
    shape_sets: dict[str, list[dict[str, int]]]  # smoke / bench / sweep
    defaults: dict[str, int]  # dimensions a --shape may leave out
    check_shape: Callable[[dict[str, int]], None]  # raises ShapeError for invalid shapes
    traffic: Callable[[dict[str, int], int], Traffic]  # (shape, bytes per element of q) -> Traffic
    tolerances: dict[str, Tolerance]  # keyed by the dtype of the inputs
    dtypes: dict[str, str]  # device kind ('cpu'/'cuda') -> input dtype name
    shipped_kernels: tuple[str, ...] = ("starter",)
    # the dimension whose inputs stack along tensor dim 0, the reference treating each element on its
    # own (so the judge may run the reference once over several calls' inputs); None: never stacked
    batch_dim: str | None = None
    seeds: int = 3
    notes: dict[str, str] = field(default_factory=dict)
    # probe shapes: device kind -> dimension -> (lo, hi) drawn per evaluation (none: no probes), and the
    # dimensions drawn log-uniformly (sequence lengths: short ones are where chunked kernels break)
    probe_ranges: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    log_drawn_dims: tuple[str, ...] = ()
    # the problem's source, for a problem given as a file (kernels/problems/kernelbench.py): it travels by value
    source: str | None = None

    def reference_module(self):
        """make_inputs / output_spec / reference (imported in the judge and the sandbox only)."""
        return importlib.import_module(f"kernels.problems.{self.name}.reference")

    def baselines_module(self):
        return importlib.import_module(f"kernels.problems.{self.name}.baselines")

    @property
    def folder(self) -> Path:
        return PROBLEMS_DIR / self.name

    @property
    def statement(self) -> str:
        return (self.folder / "statement.md").read_text()

    def shapes(self, set_name: str) -> list[dict[str, int]]:
        if set_name not in self.shape_sets:
            raise ShapeError(f"{self.name} has no shape set {set_name!r}; known: {', '.join(self.shape_sets)}")
        return [dict(s) for s in self.shape_sets[set_name]]

    def shape(self, given: dict[str, int]) -> dict[str, int]:
        """A full, validated shape from NAME=VALUE pairs (missing dimensions take the defaults)."""
        unknown = set(given) - set(self.dims)
        if unknown:
            raise ShapeError(f"{self.name} has no dimension {', '.join(sorted(unknown))}; dimensions: {', '.join(self.dims)}")
        full = {d: int(given.get(d, self.defaults.get(d, 0))) for d in self.dims}
        missing = [d for d in self.dims if d not in given and d not in self.defaults]
        if missing:
            raise ShapeError(f"{self.name} needs {', '.join(missing)} in a shape")
        for d, v in full.items():
            if v < 1:
                raise ShapeError(f"{d}={v}: every dimension must be at least 1")
        self.check_shape(full)
        return full

    def kernel_path(self, name: str) -> Path:
        if name not in self.shipped_kernels:
            raise KeyError(name)
        return self.folder / f"{name}.py"


def parse_shape(text: str) -> dict[str, int]:
    """'B=3,H=4,S=1000' -> {'B': 3, 'H': 4, 'S': 1000}."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep:
            raise ShapeError(f"{part!r} is not NAME=VALUE")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise ShapeError(f"{part!r}: {value!r} is not an integer") from None
    if not out:
        raise ShapeError(f"empty shape {text!r}")
    return out


def get_problem(name: str, source: str | None = None) -> ProblemSpec:
    """A built-in problem by name, or, with `source`, the KernelBench-format file problem it holds."""
    if source is not None:
        from kernels.problems.kernelbench import file_problem
        return file_problem(name, source)
    if name not in PROBLEM_NAMES:
        raise KeyError(f"unknown problem {name!r}; known: {', '.join(PROBLEM_NAMES)}")
    return importlib.import_module(f"kernels.problems.{name}.problem").PROBLEM


def resolve_problem(arg: str) -> tuple[str, str | None]:
    """A --problem argument -> (name, source): a built-in name, a built-in problem's folder (like
    kernels/problems/kda/), or a KernelBench-format file, whose source is read and checked here."""
    if arg in PROBLEM_NAMES:
        return arg, None
    path = Path(arg)
    if path.is_dir():
        if path.resolve().parent == PROBLEMS_DIR and path.name in PROBLEM_NAMES:
            return path.name, None
        raise ProblemFileError(f"problem folder {arg!r} is not one of the built-in problems ({', '.join(PROBLEM_NAMES)})")
    if path.is_file():
        try:
            source = user_file.read_text(path, "problem")
        except user_file.UserFileError as exc:
            raise ProblemFileError(str(exc)) from None
        get_problem(path.stem, source)  # raises ProblemFileError with the reason
        return path.stem, source
    raise ProblemFileError(f"unknown problem {arg!r}: neither a built-in problem ({', '.join(PROBLEM_NAMES)}), "
                     "a problem folder, nor a KernelBench-format .py file")


def resolve_kernel(problem: ProblemSpec, kernel: str) -> tuple[str, str]:
    """A kernel argument (a shipped kernel's name or a file path) -> (label, source)."""
    if kernel in problem.shipped_kernels:
        path = problem.kernel_path(kernel)
        return kernel, path.read_text()
    path = Path(kernel)
    if path.is_file():
        return str(path), user_file.read_text(path, "kernel")
    raise FileNotFoundError(
        f"kernel {kernel!r} is neither a file nor a shipped kernel of {problem.name} "
        f"(shipped: {', '.join(problem.shipped_kernels)})")
