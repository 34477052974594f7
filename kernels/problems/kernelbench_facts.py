"""What a KernelBench-format file is, found by running it (kernels/problems/kernelbench_runtime.py): which of
its constants are sizes (they shape its inputs or Model's parameters) and which are other constants
(a padding, a reduce dim, a scale), small sizes chosen by itself for a CPU, and whether its reference
runs at each shape. It executes the user's file, so it runs where problem code runs: in a fenced
process, never in a worker or the judge.

Sizes are told apart by trying: a constant is a size when changing it (pinned, the file re-run)
changes the shape of an input or of a parameter, on the meta device (no memory, no time, at any
size). Small sizes: every size is halved together, or the largest one at a time, down to a floor,
until the inputs and parameters hold about SMALL_ELEMENTS elements, and the reference must run there."""
from __future__ import annotations

import math
import time
import traceback

import torch
from pydantic import BaseModel, Field

from kernels.problems.kernelbench_runtime import FileReference

SMALL_ELEMENTS = 32_768  # inputs and parameters together, for the CPU's Triton interpreter
FLOORS = (1, 4, 8, 16, 32)  # the least a shrunk size may become, tried in turn until the reference runs
MAX_HALVINGS = 400


class ReferenceCall(BaseModel):
    shape: dict[str, int]
    status: str  # ok | error
    output_shape: list[int] | None = None
    seconds: float | None = None
    error: str | None = None


class FileFacts(BaseModel):
    name: str
    sizes: dict[str, int]  # the file's own values
    constants: dict[str, int | float | bool | str] = Field(default_factory=dict)
    small: dict[str, int] | None = None  # sizes chosen for a CPU (None: the file declares SMOKE_SHAPES, or none ran)
    small_elements: int | None = None


def problem_error(name: str, exc: BaseException) -> str:
    """One line: the file's line where the problem's own code failed, and why."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == f"<problem {name}>"]
    where = f", line {frames[-1].lineno}" if frames else ""
    text = " ".join(str(exc).split())
    return f"problem {name}{where}: {type(exc).__name__}: {text[:300]}"


def _footprint(ref: FileReference, shape: dict[str, int]) -> tuple[tuple, tuple, int]:
    """Input and parameter shapes, and their element count, at this shape (meta tensors)."""
    inputs = ref.make_inputs(shape, 0, "meta", torch.float32)
    init = ref.init_inputs(shape)
    with torch.device("meta"):
        model = ref.module.Model(*init)
    ins = tuple(tuple(v.shape) if isinstance(v, torch.Tensor) else ("value", repr(v)) for v in inputs.values())
    params = tuple(tuple(p.shape) for p in list(model.parameters()) + list(model.buffers()))
    count = sum(math.prod(v.shape) for v in inputs.values() if isinstance(v, torch.Tensor))
    count += sum(math.prod(p) for p in params)
    return ins, params, count


def _elements(ref: FileReference, shape: dict[str, int]) -> int | None:
    try:
        return _footprint(ref, shape)[2]
    except Exception:  # noqa: BLE001 - a shape the file cannot take
        return None


def split_sizes(ref: FileReference, candidates: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(sizes, other constants) among the file's overridable integers."""
    base = _footprint(ref, {})[:2]
    sizes, others = {}, {}
    for name, value in candidates.items():
        changed = False
        for trial in (value + 1, 2 * value if value else 2):
            try:
                if _footprint(ref, {name: trial})[:2] != base:
                    changed = True
                    break
            except Exception:  # noqa: BLE001 - the file refuses the change: it constrains a shape
                changed = True
                break
        (sizes if changed else others)[name] = value
    return sizes, others


def _halve_all(ref, sizes, budget, floor):
    shape = dict(sizes)
    n = _elements(ref, shape)
    for _ in range(MAX_HALVINGS):
        if n is None or n <= budget:
            break
        trial = {k: (max(floor, v // 2) if v > floor else v) for k, v in shape.items()}
        m = _elements(ref, trial)
        if trial == shape or m is None:
            break
        shape, n = trial, m
    return shape, n


def _halve_largest(ref, sizes, budget, floor):
    shape = dict(sizes)
    n = _elements(ref, shape)
    held: set[str] = set()
    for _ in range(MAX_HALVINGS):
        if n is None or n <= budget:
            break
        movable = sorted((v, k) for k, v in shape.items() if v > floor and k not in held)
        if not movable:
            break
        _, k = movable[-1]
        trial = {**shape, k: max(floor, shape[k] // 2)}
        m = _elements(ref, trial)
        if m is None:
            held.add(k)  # the file needs this one as it is, relative to the others
            continue
        shape, n = trial, m
    return shape, n


def runs(ref: FileReference, shape: dict[str, int], device: str = "cpu",
         dtype: torch.dtype = torch.float32) -> ReferenceCall:
    """The reference once at this shape, timed; its error as one line."""
    t0 = time.perf_counter()
    try:
        inputs = ref.make_inputs(shape, 0, device, dtype)
        out = ref.reference(**inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        return ReferenceCall(shape=shape, status="ok", output_shape=list(out.shape),
                             seconds=round(time.perf_counter() - t0, 4))
    except Exception as exc:  # noqa: BLE001 - the problem's own failure, reported
        return ReferenceCall(shape=shape, status="error", error=problem_error(ref.name, exc),
                             seconds=round(time.perf_counter() - t0, 4))


def small_sizes(ref: FileReference, sizes: dict[str, int], budget: int = SMALL_ELEMENTS) -> tuple[dict[str, int], int] | None:
    """Sizes whose inputs and parameters hold at most `budget` elements (or the fewest found), at which
    the reference runs on the CPU; None when it runs at none of those tried."""
    tried: list[tuple[int, dict[str, int]]] = []
    for floor in FLOORS:
        for how in (_halve_all, _halve_largest):
            shape, n = how(ref, sizes, budget, floor)
            if n is None or (n, shape) in tried:
                continue
            tried.append((n, shape))
            if n <= budget and runs(ref, shape).status == "ok":
                return shape, n
    for n, shape in sorted(tried, key=lambda t: t[0]):
        if runs(ref, shape).status == "ok":
            return shape, n
    return None


def file_facts(name: str, source: str, candidates: dict[str, int], declared_small: bool) -> FileFacts:
    """Sizes, other constants and (unless the file declares SMOKE_SHAPES) small sizes for a CPU."""
    ref = FileReference(name, source)
    sizes, others = split_sizes(ref, candidates)
    constants: dict[str, int | float | bool | str] = dict(others)
    for k, v in vars(ref.module).items():
        if not k.startswith("_") and k not in sizes and isinstance(v, (int, float, bool, str)) and not callable(v):
            constants.setdefault(k, v)
    facts = FileFacts(name=name, sizes=sizes, constants=constants)
    if not declared_small and sizes:
        found = small_sizes(ref, sizes)
        if found:
            facts.small, facts.small_elements = found
    return facts
