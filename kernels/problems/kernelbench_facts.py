"""What a KernelBench-format file is, found by running it (kernels/problems/kernelbench_runtime.py): which of
its constants are sizes (they shape its inputs or Model's parameters) and which are other constants
(a padding, a reduce dim, a scale), small sizes chosen by itself for a CPU, and whether its reference
runs at each shape. It executes the user's file, so it runs where problem code runs: in a fenced
process (kernels/evaluator/problem_process.py), never in a worker, the CLI or the judge.

Sizes are told apart by trying: a constant is a size when changing it (pinned, the file re-run)
changes the shape of an input or of a parameter, on the meta device (no memory, no time, at any
size). Small sizes: the largest size halved at a time (or all of them together), down to a floor
(the largest floor first, so that small sizes such as a kernel's width or a channel count keep
their value where they can), until the inputs and parameters hold about SMALL_ELEMENTS elements;
the reference must run there."""
from __future__ import annotations

import math
import time
import traceback

import torch

from kernels.evaluator.timing import reference_defect
from kernels.labels import shape_label
from kernels.problems.kernelbench import RESERVED, FileFacts, ReferenceCall
from kernels.problems.kernelbench_runtime import FileReference, ProblemCodeError

SMALL_ELEMENTS = 32_768  # inputs and parameters together, for the CPU's Triton interpreter
FLOORS = (32, 16, 8, 4, 1)  # the least a shrunk size may become, tried in turn until the reference runs
MAX_HALVINGS = 400
NOISE_REL = 1e-3  # a float32 reference further than this from float64 is rounding noise: no kernel can match it
NOISE_BUDGETS = (1, 4, 16)  # small sizes whose reference is noise: tried again with these times the budget
MAX_ELEMENTS = 2**38  # inputs and parameters of one shape: past this no device holds them


def problem_line(name: str, exc: BaseException) -> int | None:
    """The line of the problem file where the exception left its own code (the innermost such frame)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == f"<problem {name}>"]
    return frames[-1].lineno if frames else None


def is_problems_fault(name: str, exc: BaseException) -> bool:
    """Whether it is the problem's failure: anything its code raised, a rule of the format it broke, or
    torch failing on what it built (a forward bound straight to a torch function leaves no frame of the
    file); only an I/O error outside the file's code is the process's own."""
    return (isinstance(exc, ProblemCodeError) or problem_line(name, exc) is not None
            or not isinstance(exc, OSError))


def problem_error(name: str, exc: BaseException) -> str:
    """One line: the file's line where the problem's own code failed, and why."""
    line = problem_line(name, exc)
    where = f", line {line}" if line is not None else ""
    text = " ".join(str(exc).split()).removeprefix(f"problem {name}: ")
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


def elements(ref: FileReference, shape: dict[str, int]) -> int | None:
    """Elements of the inputs and parameters at this shape; None when the file cannot take the shape."""
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
    n = elements(ref, shape)
    for _ in range(MAX_HALVINGS):
        if n is None or n <= budget:
            break
        trial = {k: (max(floor, v // 2) if v > floor else v) for k, v in shape.items()}
        m = elements(ref, trial)
        if trial == shape or m is None:
            break
        shape, n = trial, m
    return shape, n


def _halve_largest(ref, sizes, budget, floor):
    shape = dict(sizes)
    n = elements(ref, shape)
    held: set[str] = set()
    for _ in range(MAX_HALVINGS):
        if n is None or n <= budget:
            break
        movable = sorted((v, k) for k, v in shape.items() if v > floor and k not in held)
        if not movable:
            break
        _, k = movable[-1]
        trial = {**shape, k: max(floor, shape[k] // 2)}
        m = elements(ref, trial)
        if m is None:
            held.add(k)  # the file needs this one as it is, relative to the others
            continue
        shape, n = trial, m
    return shape, n


def runs(ref: FileReference, shape: dict[str, int], device: str = "cpu",
         dtype: torch.dtype = torch.float32) -> ReferenceCall:
    """The reference once at this shape, timed (inputs made on the device included); its error as one line."""
    t0 = time.perf_counter()
    try:
        inputs = ref.make_inputs(shape, 0, device, dtype)
        out = ref.reference(**inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        defect = reference_defect(out)
        if defect:  # the judge refuses such a reference: say so before a night's run
            return ReferenceCall(shape=shape, status="error", output_shape=list(out.shape),
                                 error=f"problem {ref.name}: its reference at {shape_label(shape) or 'its own sizes'} {defect}",
                                 seconds=round(time.perf_counter() - t0, 4))
        return ReferenceCall(shape=shape, status="ok", output_shape=list(out.shape),
                             seconds=round(time.perf_counter() - t0, 4))
    except Exception as exc:  # noqa: BLE001 - the problem's own failure, reported
        return ReferenceCall(shape=shape, status="error", error=problem_error(ref.name, exc),
                             line=problem_line(ref.name, exc), seconds=round(time.perf_counter() - t0, 4))


def rounding_noise(ref: FileReference, shape: dict[str, int], widen_seed: int | None = None) -> float | None:
    """How far the reference's float32 output is from the module's own float64 output on the same inputs
    (relative L2), on the CPU: near 1 where the output is rounding noise, as a GroupNorm over groups of
    one channel gives (every value is its group's mean: zero), which no kernel can be judged against.
    With `widen_seed`, on the inputs widened as the judge widens them (FileReference.widen). None where
    float64 fails (an op without it): not known."""
    try:
        inputs = ref.make_inputs(shape, 0, "cpu", torch.float32)
        if widen_seed is not None:
            ref.widen(inputs, widen_seed)
        out = ref.reference(**inputs)
        args = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in ref._args(inputs)]
        with torch.no_grad():
            exact = ref.model(ref.current_shape, "cpu", torch.float64)(*args)
    except Exception:  # noqa: BLE001 - float64 not supported by an op: not known
        return None
    if type(exact) is not torch.Tensor or tuple(exact.shape) != tuple(out.shape) or not exact.is_floating_point():
        return None
    exact = exact.double()
    return float((out.double() - exact).norm() / exact.norm().clamp_min(1e-300))


def _judgeable(noise: float | None) -> bool:
    return noise is None or noise <= NOISE_REL


Found = tuple[dict[str, int], int, "float | None"]  # sizes, their elements, the reference's noise there


def small_sizes(ref: FileReference, sizes: dict[str, int], budget: int = SMALL_ELEMENTS) -> Found | ReferenceCall:
    """Sizes whose inputs and parameters hold at most `budget` elements (or the fewest found), at which
    the reference runs on the CPU and its output is not rounding noise (else, with a larger budget, up
    to NOISE_BUDGETS times; the first sizes found otherwise), with their elements and the reference's
    noise there (rounding_noise); otherwise the reference's failure at the smallest sizes tried."""
    if not sizes:  # nothing to shrink: the file as written
        n = elements(ref, {})
        call = runs(ref, {})
        return ({}, n or 0, rounding_noise(ref, {})) if call.status == "ok" else call
    noisy = None
    for scale in NOISE_BUDGETS:
        found = _small_sizes(ref, sizes, budget * scale)
        if isinstance(found, ReferenceCall):
            return noisy or found
        if _judgeable(found[2]):
            return found
        noisy = noisy or found
    return noisy


def _small_sizes(ref: FileReference, sizes: dict[str, int], budget: int) -> Found | ReferenceCall:
    tried: list[tuple[int, dict[str, int]]] = []
    first = None
    for floor in FLOORS:
        for how in (_halve_largest, _halve_all):
            shape, n = how(ref, sizes, budget, floor)
            if n is None or (n, shape) in tried:
                continue
            tried.append((n, shape))
            if n <= budget and runs(ref, shape).status == "ok":
                noise = rounding_noise(ref, shape)
                if _judgeable(noise):
                    return shape, n, noise
                first = first or (shape, n, noise)
    if first is not None:
        return first
    failed = None
    for n, shape in sorted(tried, key=lambda t: t[0]):
        call = runs(ref, shape)
        if call.status == "ok":
            return shape, n, rounding_noise(ref, shape)
        failed = failed or call
    return failed or ReferenceCall(shape=dict(sizes), status="error",
                                   error=f"problem {ref.name}: no shape it can take was found")


def file_facts(ref: FileReference, candidates: dict[str, int], literals: dict[str, object], *,
               small: bool) -> FileFacts:
    """Sizes, other constants (the overridable integers that are no sizes, and the other literal
    values: `literals`), and (`small`) small sizes for a CPU at which the reference runs."""
    sizes, others = split_sizes(ref, candidates)
    constants: dict[str, int | float | bool | str] = dict(others)
    constants.update({k: v for k, v in literals.items()
                      if k not in sizes and k not in RESERVED and isinstance(v, (int, float, bool, str))})
    facts = FileFacts(name=ref.name, sizes=sizes, constants=constants)
    if small:
        found = small_sizes(ref, sizes)
        if isinstance(found, ReferenceCall):
            facts.small_error = found.error
        else:
            facts.small, facts.small_elements, noise = found
            facts.small_noise = noise if noise is not None and math.isfinite(noise) else None
    return facts
