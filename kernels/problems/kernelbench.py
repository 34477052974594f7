"""Problems given as KernelBench-format files: `class Model(nn.Module)`, module-level size constants,
`get_inputs()` and `get_init_inputs()`. The candidate is a module defining `class ModelNew(nn.Module)`
with Model's constructor; the sandbox loads Model's state_dict into it, so parameters are identical.

The spec half (`file_problem`) reads the file's syntax only, so the CLI and the workflow's activities
can check a file without torch. The run-time half (`FileReference`) executes the file; it is built in
the problem's fenced process (kernels/evaluator/problem_process.py: inputs, reference, baselines,
roofline bytes, for the judge) and in the candidate's sandbox (its timed inputs and its ModelNew),
never in the judge or a worker: a problem file is as untrusted as a candidate.

Optional module-level constants a file may declare:
    TOLERANCE = {"rel": 1e-3, "abs_frac": 1e-2}   relative L2 and max-abs (fraction of max|ref|) limits
    SMOKE_SHAPES = [{"batch_size": 4, "dim": 33}]   the shapes used on a CPU when no --shape is given
    PROBE_RANGES = {"cpu": {"dim": (1, 64)}}     correctness-only shapes drawn per evaluation
    FLOPS = "2 * batch_size * in_features * out_features"   tensor-core FLOPs, for the roofline
    DTYPE = "bfloat16"                          the input dtype (default float32; --dtype overrides)
"""
from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass

from pydantic import BaseModel, Field

from kernels.problems.spec import ProblemFileError, ProblemSpec, ShapeError, Tolerance, Traffic

ENTRY_POINT = "ModelNew"
# Relative L2 error and max-abs error (as a fraction of max|ref|) an honest kernel stays under against
# the fp32 reference: fp32 leaves room for TF32 tensor-core dots (Triton's default on CUDA), half
# precisions for their rounding of inputs, parameters and the output.
DEFAULT_TOLERANCES = {
    "float32": Tolerance(rel=2e-3, abs_frac=2e-2),
    "float16": Tolerance(rel=5e-3, abs_frac=3e-2),
    "bfloat16": Tolerance(rel=2e-2, abs_frac=8e-2),
}
# upper-case module constants with a meaning of their own: never dimensions
RESERVED = {"TOLERANCE", "SMOKE_SHAPES", "PROBE_RANGES", "FLOPS", "DTYPE"}
DTYPES = ("float32", "float16", "bfloat16")


class ReferenceCall(BaseModel):
    """The reference run once at a shape, in the problem's fenced process."""
    shape: dict[str, int]
    status: str  # ok | error
    output_shape: list[int] | None = None
    seconds: float | None = None  # inputs made on the device and the reference, once
    error: str | None = None  # one line, with the file's line where its own code failed
    line: int | None = None  # that line


class FileFacts(BaseModel):
    """What running the file (kernels/problems/kernelbench_facts.py, in its fenced process) told."""
    name: str
    sizes: dict[str, int]  # the file's own values of the constants that shape inputs and parameters
    constants: dict[str, int | float | bool | str] = Field(default_factory=dict)  # every other constant
    small: dict[str, int] | None = None  # sizes chosen for a CPU (None: not asked, or none ran)
    small_elements: int | None = None  # inputs' and parameters' elements there
    small_error: str | None = None  # why no small sizes were found (the reference's error at the smallest tried)
    # the reference's float32 distance from float64 there (relative L2): past NOISE_REL it is rounding noise
    small_noise: float | None = Field(default=None, ge=0, allow_inf_nan=False)


def full_shape(sizes: dict[str, int], given: dict[str, int]) -> dict[str, int]:
    """A shape as the evaluation names it: every size (the file's value unless given) and the other
    constants the user gave; a constant left out keeps the file's value, so it is not named."""
    return {**sizes, **given}


def check_given(name: str, sizes: dict[str, int], given: dict[str, int]) -> str | None:
    """What is wrong with the values a user gave (sizes must be at least 1; any other constant may be
    any integer), or None."""
    bad = [f"{k}={v}" for k, v in given.items() if k in sizes and v < 1]
    if bad:
        return f"problem {name}: {', '.join(bad)}: a size (it shapes an input or a parameter) must be at least 1"
    return None


@dataclass(frozen=True)
class LiteralFacts:
    dims: dict[str, int]  # integers written as literals (or arithmetic of literals): overridable
    constants: dict[str, object]  # the reserved declarations, and other literal values
    docstrings: list[str]


# the binary operators of literal arithmetic and of FLOPS (evaluated in floats there)
_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
          ast.Div: operator.truediv, ast.Mod: operator.mod, ast.Pow: operator.pow}
# The widest integer literal arithmetic may make: it runs in the worker, the CLI and the judge, where a
# file's `((2**64)**64)**64...` would otherwise hold the interpreter (and the GIL) for hours
LITERAL_BITS = 4096


def _bounded(op: type, a, b) -> None:
    """Raises ValueError before an integer product or power wider than LITERAL_BITS is computed."""
    if not (isinstance(a, int) and isinstance(b, int)):
        return  # floats overflow to inf or raise OverflowError: bounded either way
    if op is ast.Mult and a.bit_length() + b.bit_length() > LITERAL_BITS:
        raise ValueError("too large")
    if op is ast.Pow and b > 0 and a.bit_length() * b > LITERAL_BITS:
        raise ValueError("too large")


def _literal(node: ast.AST):
    """The value of a literal, or of arithmetic on literals (`1024 * 2`, `2 ** 14`); raises ValueError
    for anything that names something (a constant derived from another follows it: not overridable),
    or whose value would pass LITERAL_BITS."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.Tuple):
        return tuple(_literal(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _literal(node.operand)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        a, b = _literal(node.left), _literal(node.right)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
            if isinstance(node.op, ast.Pow) and abs(b) > 64:
                raise ValueError("exponent too large")
            _bounded(type(node.op), a, b)
            return _ARITH[type(node.op)](a, b)
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):  # (None: a `**` unpacking)
        keys = [_literal(k) for k in node.keys]
        for key in keys:
            try:
                hash(key)
            except TypeError:  # `{[1]: 2}`: Python itself would refuse it when the file runs
                raise ValueError("a dict with an unhashable key") from None
        return dict(zip(keys, (_literal(v) for v in node.values)))
    raise ValueError("not a literal")


def _bindings(node: ast.stmt) -> list[tuple[str, ast.AST]]:
    """(name, value expression) pairs a top-level assignment binds: `a = b = 1`, `D, H = 4, 8`, `n: int = 3`."""
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return [(node.target.id, node.value)]
    if not isinstance(node, ast.Assign):
        return []
    out = []
    for target in node.targets:
        if isinstance(target, ast.Name):
            out.append((target.id, node.value))
        elif (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
              and len(target.elts) == len(node.value.elts)):
            out += [(t.id, v) for t, v in zip(target.elts, node.value.elts) if isinstance(t, ast.Name)]
    return out


def literal_facts(name: str, source: str) -> LiteralFacts:
    """Overridable integers and declared constants, from the syntax tree alone; every missing piece named."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProblemFileError(f"problem {name}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except (RecursionError, MemoryError):  # the parser's own limit on nesting (`1+1+...`, `- - -...1`)
        raise ProblemFileError(f"problem {name}: an expression nested too deeply to parse") from None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [what for what, ok in (("class Model", "Model" in classes), ("get_inputs()", "get_inputs" in functions),
                                     ("get_init_inputs()", "get_init_inputs" in functions)) if not ok]
    if missing:
        raise ProblemFileError(f"problem {name}: not a KernelBench-format file: it defines no {', no '.join(missing)}")
    dims: dict[str, int] = {}
    constants: dict[str, object] = {}
    for node in tree.body:
        for key, value_node in _bindings(node):
            try:
                value = _literal(value_node)
            except (ValueError, ZeroDivisionError, OverflowError, SyntaxError, RecursionError, MemoryError):
                dims.pop(key, None)  # reassigned from an expression: it follows others
                continue
            if key in RESERVED:
                constants[key] = value
            elif isinstance(value, int) and not isinstance(value, bool):
                dims[key] = value
            elif (isinstance(value, tuple) and value
                  and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
                dims.update({f"{key}[{i}]": v for i, v in enumerate(value)})
            elif isinstance(value, (float, bool, str)):
                constants[key] = value
    docstrings = [d for d in (ast.get_docstring(tree), *(ast.get_docstring(c) for c in classes.values())) if d]
    return LiteralFacts(dims, constants, docstrings)


def _tolerances(name: str, declared) -> dict[str, Tolerance]:
    """TOLERANCE as declared: each limit above 0 and below 1, where an output of zeros (relative L2
    error 1, max-abs error max|ref|) fails both tests; at 1 or more (inf included) one test checks nothing."""
    if declared is None:
        return dict(DEFAULT_TOLERANCES)
    try:
        tol = Tolerance(rel=float(declared["rel"]), abs_frac=float(declared["abs_frac"]))
    except (TypeError, KeyError, ValueError, OverflowError):
        tol = None
    if tol is None or not all(0 < v < 1 for v in (tol.rel, tol.abs_frac)):
        raise ProblemFileError(f"problem {name}: TOLERANCE must be a dict {{'rel': float, 'abs_frac': float}}, each "
                               "above 0 and below 1 (an output of zeros must fail both)")
    return {d: tol for d in DTYPES}


def _declared_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= MAX_VALUE


def _shape_list(name: str, what: str, declared, dims: dict[str, int]) -> list[dict[str, int]]:
    if (not isinstance(declared, list) or not declared or len(declared) > MAX_DECLARED_SHAPES
            or not all(isinstance(s, dict) and all(_declared_int(v) for v in s.values()) for s in declared)):
        raise ProblemFileError(f"problem {name}: {what} must be a list of 1 to {MAX_DECLARED_SHAPES} {{dimension: int}} "
                               "dicts, each integer at most 2^40 in magnitude")
    out = []
    for s in declared:
        unknown = set(s) - set(dims)
        if unknown:
            raise ProblemFileError(f"problem {name}: {what} names {', '.join(sorted(unknown))}, which the file does not define")
        out.append({**dims, **s})
    return out


def _probe_ranges(name: str, declared, dims: dict[str, int]) -> dict[str, dict[str, tuple[int, int]]]:
    """PROBE_RANGES as the judge draws from it: per device, each dimension's (lo, hi), integers with
    1 <= lo <= hi <= 2^40."""
    def pair(r) -> bool:
        return (isinstance(r, (tuple, list)) and len(r) == 2 and all(_declared_int(v) for v in r)
                and 1 <= r[0] <= r[1])
    if not (isinstance(declared, dict) and set(declared) <= {"cpu", "cuda"}
            and all(isinstance(v, dict) and set(v) <= set(dims) and all(pair(r) for r in v.values())
                    for v in declared.values())):
        raise ProblemFileError(f"problem {name}: PROBE_RANGES must be {{'cpu'|'cuda': {{dimension: (lo, hi)}}}}, "
                               "integers with 1 <= lo <= hi <= 2^40")
    return {dev: {d: (lo, hi) for d, (lo, hi) in r.items()} for dev, r in declared.items()}


def statement(name: str, source: str, told: FileFacts | None = None) -> str:
    """The task for the model, from the file's docstrings and its source; with the facts its process
    told (`told`), the sizes apart from the other constants."""
    facts = literal_facts(name, source)
    if told is not None:
        sizes = ", ".join(f"{k}={v}" for k, v in told.sizes.items()) or "none"
        others = ", ".join(f"{k}={v!r}" for k, v in told.constants.items())
        constants = (f"Sizes (they shape the inputs and Model's parameters; the evaluator may override them): "
                     f"{sizes}." + (f" Other constants: {others}." if others else ""))
    else:
        dims = ", ".join(f"{k}={v}" for k, v in facts.dims.items()) or "none"
        constants = f"Overridable constants (the evaluator may override them): {dims}."
    intro = "\n\n".join(facts.docstrings)
    return (f"# Problem {name}\n\n" + (intro + "\n\n" if intro else "")
            + "Write a module defining `class ModelNew(nn.Module)` with the same constructor as `Model` below "
              "(the evaluator loads Model's state_dict into it, so name parameters and submodules as Model "
              "does) whose forward computes what Model.forward computes, with your own Triton kernels "
              "(@triton.jit). forward may allocate, view, copy and cast tensors with torch, never compute "
              "with it (no nn.Linear call, no torch.matmul, softmax, ...): the arithmetic must run in your "
              "kernels. Read parameters as tensors (self.weight, self.linear.weight).\n\n"
            + constants + "\n\n"
            + "```python\n" + source.strip() + "\n```\n")


def file_problem(name: str, source: str) -> ProblemSpec:
    facts = literal_facts(name, source)
    c = facts.constants
    bench = [dict(facts.dims)]
    shape_sets = {"bench": bench}
    if "SMOKE_SHAPES" in c:
        shape_sets["smoke"] = _shape_list(name, "SMOKE_SHAPES", c["SMOKE_SHAPES"], facts.dims)
    probe_ranges = _probe_ranges(name, c["PROBE_RANGES"], facts.dims) if "PROBE_RANGES" in c else {}
    dtype = c.get("DTYPE", "float32")
    if dtype not in DTYPES:
        raise ProblemFileError(f"problem {name}: DTYPE {dtype!r} is not one of {', '.join(DTYPES)}")
    flops = c.get("FLOPS")
    if flops is not None and not isinstance(flops, str):
        raise ProblemFileError(f"problem {name}: FLOPS must be an expression in the dimensions, as a string")

    if flops is not None:
        _check_flops(name, flops, facts.dims)
        try:
            _flops(flops, facts.dims)  # at the file's own sizes, so that a runaway expression is told now
        except ValueError as exc:
            raise ProblemFileError(f"problem {name}: {exc}") from None

    def traffic(shape: dict[str, int], elem: int) -> Traffic:
        # the memory floor: inputs, parameters and outputs through device memory once (this runs the
        # file's code: the judge asks the problem's fenced process instead, kernels/evaluator/judge.py)
        from kernels.problems.kernelbench_runtime import FileReference
        nbytes = FileReference.get(name, source).min_bytes(shape, elem)
        return Traffic(nbytes, _flops(flops, shape))

    def check(shape: dict[str, int]) -> None:
        big = [f"{k}={v}" for k, v in shape.items() if abs(v) > MAX_VALUE]
        if big:
            raise ShapeError(f"problem {name}: {', '.join(big)}: above 2^40 in magnitude, too large to evaluate")

    spec = FileProblemSpec(
        name=name, entry_point=ENTRY_POINT, dims=tuple(facts.dims), shape_sets=shape_sets, defaults=dict(facts.dims),
        check_shape=check, traffic=traffic, tolerances=_tolerances(name, c.get("TOLERANCE")),
        dtypes={"cpu": dtype, "cuda": dtype}, shipped_kernels=(), probe_ranges=probe_ranges, source=source, seeds=2,
        flops=flops)
    return spec


# FLOPS is arithmetic over the dimensions and a few of math's functions, nothing else: it is evaluated
# outside the problem's fenced process (the judge's roofline), so its syntax is checked against this
# first, and it is evaluated in floats (_flops): no integer power or factorial can grow without bound
_FLOPS_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call, ast.Attribute,
                ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd)
_FLOPS_MATH = {"sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log2": math.log2, "log10": math.log10,
               "ceil": math.ceil, "floor": math.floor, "pow": math.pow, "fabs": math.fabs}
_FLOPS_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}
MAX_FLOPS_CHARS = 1000


def _check_flops(name: str, expr: str, dims: dict[str, int]) -> None:
    refused = ProblemFileError(f"problem {name}: FLOPS may use the dimensions, numbers, + - * / // % ** and math's "
                               f"{', '.join(sorted(_FLOPS_MATH | _FLOPS_CONSTANTS))} only, in at most "
                               f"{MAX_FLOPS_CHARS} characters")
    if len(expr) > MAX_FLOPS_CHARS:
        raise refused
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise ProblemFileError(f"problem {name}: FLOPS {expr!r} is not an expression") from None
    except (RecursionError, MemoryError):
        raise refused from None
    for node in ast.walk(tree):
        ok = isinstance(node, _FLOPS_NODES)
        if isinstance(node, ast.Constant):
            ok = isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
        elif isinstance(node, ast.Name):
            ok = node.id in dims or node.id == "math"
        elif isinstance(node, ast.Attribute):
            ok = (isinstance(node.value, ast.Name) and node.value.id == "math"
                  and node.attr in _FLOPS_MATH.keys() | _FLOPS_CONSTANTS.keys())
        elif isinstance(node, ast.Call):
            ok = (isinstance(node.func, ast.Attribute) and node.func.attr in _FLOPS_MATH and not node.keywords
                  and not any(isinstance(a, ast.Starred) for a in node.args))
        if not ok:
            raise ProblemFileError(f"problem {name}: FLOPS may use the dimensions, numbers, + - * / // % ** and "
                                   f"math's {', '.join(sorted(_FLOPS_MATH | _FLOPS_CONSTANTS))} only; "
                                   f"{type(node).__name__} in {expr!r}")


def _flops_value(node: ast.AST, shape: dict[str, int]) -> float:
    """A checked FLOPS tree's value, every step in floats (an overflow raises OverflowError)."""
    if isinstance(node, ast.Expression):
        return _flops_value(node.body, shape)
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return float(shape[node.id])
    if isinstance(node, ast.Attribute):
        return _FLOPS_CONSTANTS[node.attr]
    if isinstance(node, ast.UnaryOp):
        v = _flops_value(node.operand, shape)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        return float(_ARITH[type(node.op)](_flops_value(node.left, shape), _flops_value(node.right, shape)))
    if isinstance(node, ast.Call):
        return float(_FLOPS_MATH[node.func.attr](*(_flops_value(a, shape) for a in node.args)))
    raise ValueError(f"{type(node).__name__} in FLOPS")


def _flops(expr: str | None, shape: dict[str, int]) -> float:
    """FLOPS at a shape: a finite number of at least 0, or ValueError naming why not."""
    if not expr:
        return 0.0
    try:
        value = _flops_value(ast.parse(expr, mode="eval"), shape)
    except (ArithmeticError, ValueError, TypeError, KeyError, RecursionError) as exc:
        raise ValueError(f"FLOPS {expr!r} cannot be evaluated at {shape}: {type(exc).__name__}: {exc}") from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"FLOPS {expr!r} at {shape} is {value}, not a finite count")
    return value


def tensor_flops(spec: "FileProblemSpec", shape: dict[str, int]) -> float:
    """The tensor-core FLOPs a file declares (FLOPS) at this shape; 0 when it declares none."""
    return _flops(spec.flops, shape)


@dataclass(frozen=True)
class FileProblemSpec(ProblemSpec):
    """A ProblemSpec whose reference and baselines are the file's Model, and whose statement is made
    from the file."""
    flops: str | None = None  # the file's FLOPS expression, checked (_check_flops)

    @property
    def statement(self) -> str:
        return statement(self.name, self.source)

    def chooses_smoke(self, set_name: str | None) -> bool:
        """Whether this set's shapes are chosen by running the file (small sizes for a CPU, found in its
        fenced process: kernels/problems/kernelbench_facts.py), not read from it."""
        return set_name == "smoke" and "smoke" not in self.shape_sets

    def shapes(self, set_name: str) -> list[dict[str, int]]:
        """A declared set; [] for smoke when the file declares no SMOKE_SHAPES (chooses_smoke)."""
        if self.chooses_smoke(set_name):
            return []
        return super().shapes(set_name)

    def shape(self, given: dict[str, int]) -> dict[str, int]:
        """Any overridable constant (an integer of the file, or an element `name[i]` of its tuple of
        integers) may be given; only the values given are checked here (a size below 1 is refused once
        the file's process has told which constants are sizes). The others keep the file's values."""
        unknown = set(given) - set(self.dims)
        if unknown:
            raise ShapeError(f"problem {self.name} has no overridable constant {', '.join(sorted(unknown))}; "
                             f"it has: {', '.join(self.dims) or 'none'}")
        full = {**self.defaults, **{k: int(v) for k, v in given.items()}}
        self.check_shape({k: full[k] for k in given})
        return full

    def reference_module(self):
        from kernels.problems.kernelbench_runtime import FileReference
        return FileReference.get(self.name, self.source)

    def baselines_module(self):
        return self.reference_module()


MAX_VALUE = 2**40  # an overridable constant's magnitude
MAX_DECLARED_SHAPES = 64  # shapes in SMOKE_SHAPES

CANDIDATE_SUFFIX = "_kernel.py"  # a suite's problem foo.py starts from the candidate foo_kernel.py beside it


def suite_files(dir_or_glob: str) -> list[tuple[str, str]]:
    """(problem file, starting candidate) for each problem of a suite: the .py files of a folder, or
    those a glob matches, except the candidates (*_kernel.py) themselves. Every problem needs its
    candidate; all missing ones are named at once."""
    import glob
    from pathlib import Path
    folder = Path(dir_or_glob)
    paths = sorted(folder.glob("*.py")) if folder.is_dir() else sorted(Path(p) for p in glob.glob(dir_or_glob))
    problems = [p for p in paths if p.is_file() and not p.name.endswith(CANDIDATE_SUFFIX) and p.name != "__init__.py"]
    if not problems:
        raise ProblemFileError(f"--problems {dir_or_glob!r}: no problem files (*.py) there")
    missing = [p.name for p in problems if not p.with_name(p.stem + CANDIDATE_SUFFIX).is_file()]
    if missing:
        raise ProblemFileError(f"--problems {dir_or_glob!r}: no starting candidate <name>{CANDIDATE_SUFFIX} beside "
                               f"{', '.join(missing)}")
    return [(str(p), str(p.with_name(p.stem + CANDIDATE_SUFFIX))) for p in problems]
