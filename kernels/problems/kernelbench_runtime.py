"""The run-time half of a KernelBench-format file problem (kernels/problems/kernelbench.py): the file executed,
with its size constants overridden per shape. It runs only inside the fences: in the problem's own
process, which serves the judge (inputs, the fp32 reference, the eager and torch.compile baselines, the
roofline's bytes; kernels/evaluator/problem_process.py), and in the candidate's (the same inputs, and
the candidate's ModelNew built with Model's constructor arguments and state_dict)."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import types

import torch

from kernels.problems.spec import LazyBaseline

INPUT_PREFIX = "x"  # get_inputs()[i] travels as keyword x{i}
WIDEN_FACTOR = 2.0  # the widened inputs' scale: past a unit clamp's bounds, within exp's range
WIDEN_SALT = 0x5A17  # the widening's signs are not the inputs' own draws


class ProblemCodeError(TypeError):
    """The problem file broke a rule of the format (Model.forward returned no single tensor): its fault."""


class FileReference:
    """The file, executed once per shape: its top level runs statement by statement with the shape's
    names pinned (a pinned name keeps its value whatever the file assigns to it), so constants written
    as expressions, chained assignments and everything derived from a pinned name (`bias_shape =
    (out_channels, 1, 1)`, `hidden = dim * 4`) follow the shape."""
    _cache: dict[tuple[str, str], "FileReference"] = {}

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.tree = ast.parse(source)
        self.param_seed = 0  # the seed Model's parameters are drawn with; set fresh per evaluation
        self._modules: dict[tuple, types.ModuleType] = {}
        self.module = self.module_for({})  # the file as written
        self.current_shape: dict[str, int] | None = None
        self._models: dict[tuple, torch.nn.Module] = {}

    @classmethod
    def get(cls, name: str, source: str) -> "FileReference":
        key = (name, source)
        if key not in cls._cache:
            cls._cache[key] = cls(name, source)
        return cls._cache[key]

    def module_for(self, shape: dict[str, int]) -> types.ModuleType:
        """The file's module with these names pinned (`name[i]` pins element i of a tuple)."""
        key = tuple(sorted(shape.items()))
        if key not in self._modules:
            self._modules[key] = execute(self.name, self.tree, shape)
        return self._modules[key]

    def use_shape(self, shape: dict[str, int]) -> None:
        """get_inputs()/get_init_inputs() and Model see this shape's constants from now on."""
        self.module = self.module_for(shape)
        self.current_shape = dict(shape)

    def init_inputs(self, shape: dict[str, int]) -> list:
        self.use_shape(shape)
        return list(self.module.get_init_inputs())

    def build(self, cls, shape: dict[str, int], state: dict | None = None) -> torch.nn.Module:
        """cls(*get_init_inputs()) with Model's parameters (drawn with param_seed) loaded into it;
        cls None: this shape's Model itself."""
        init = self.init_inputs(shape)
        cls = cls or self.module.Model
        if state is None:
            torch.manual_seed(self.param_seed)
            state = self.module.Model(*init).state_dict()
            torch.seed()  # torch.initial_seed() tells nothing of the seed afterwards
        model = cls(*init)
        model.load_state_dict(state, strict=False)
        for p in model.parameters():
            p.requires_grad_(False)
        return model.eval()

    def model(self, shape: dict[str, int], device: str, dtype: torch.dtype) -> torch.nn.Module:
        key = (tuple(sorted(shape.items())), device, dtype)
        if key not in self._models:
            self._models[key] = self.build(None, shape).to(device=device, dtype=dtype)
        return self._models[key]

    def make_inputs(self, shape: dict[str, int], seed: int, device: str, dtype: torch.dtype) -> dict:
        """get_inputs() on the device itself, from a seeded generator: the same values in every process
        that asks on the same device (the judge's problem process makes the reference's, the candidate's
        process its own), and no host round trip for the file's own (large) sizes. The generator is
        reseeded from fresh entropy afterwards: torch.initial_seed() in the candidate's code tells
        nothing of the inputs' seed."""
        self.use_shape(shape)
        torch.manual_seed(seed)
        try:
            with torch.device(device):
                values = list(self.module.get_inputs())
        finally:
            torch.seed()
        return {f"{INPUT_PREFIX}{i}": _cast(v, device, dtype) for i, v in enumerate(values)}

    @staticmethod
    def widen(inputs: dict, seed: int) -> list[str]:
        """Every floating input whose values all share one sign (torch.rand's, say) multiplied, value by
        value, by +2 or -2, the signs drawn from `seed` on the input's device (the same in each process);
        the names widened. A kernel right only on the problem's own inputs (an identity for a ReLU of
        values >= 0, no clamp for a HardTanh of values under 1) is then wrong, where one that computes
        the module's function is not. Other inputs (integers, masks, mixed signs) are left as they are."""
        widened = []
        for name, v in inputs.items():
            if not (isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel()):
                continue
            if not (bool((v >= 0).all()) or bool((v <= 0).all())):
                continue
            generator = torch.Generator(device=v.device)
            generator.manual_seed(seed ^ WIDEN_SALT)
            signs = torch.randint(0, 2, v.shape, generator=generator, device=v.device).to(v.dtype)
            v.mul_(signs.mul_(2 * WIDEN_FACTOR).sub_(WIDEN_FACTOR))
            widened.append(name)
        return widened

    def _args(self, inputs: dict) -> list:
        return [inputs[f"{INPUT_PREFIX}{i}"] for i in range(len(inputs))]

    def reference(self, **inputs) -> torch.Tensor:
        """Model's output in fp32 on the (cast) inputs, with fp32 parameters."""
        args = [v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in self._args(inputs)]
        device = next((v.device.type for v in args if isinstance(v, torch.Tensor)), "cpu")
        with torch.no_grad():
            return _single(self.model(self.current_shape, device, torch.float32)(*args), self.name).float()

    def output_spec(self, shape: dict[str, int], dtype: torch.dtype) -> tuple[tuple[int, ...], torch.dtype]:
        out = self._meta_output(shape, dtype)
        return tuple(out.shape), (dtype if out.is_floating_point() else out.dtype)

    def _meta_output(self, shape, dtype) -> torch.Tensor:
        """The output's shape without computing it: inputs, Model and forward on the meta device (no
        memory, no time at any size); computed on the CPU only where an op has no meta kernel."""
        with torch.no_grad():
            try:
                inputs = self.make_inputs(shape, 0, "meta", dtype)
                init = self.init_inputs(shape)
                with torch.device("meta"):
                    model = self.module.Model(*init).to(dtype=dtype)
                return _single(model(*self._args(inputs)), self.name)
            except Exception:
                inputs = self.make_inputs(shape, 0, "cpu", dtype)
                return _single(self.model(shape, "cpu", dtype)(*self._args(inputs)), self.name)

    def min_bytes(self, shape: dict[str, int], elem: int) -> float:
        """Inputs, parameters and the output, each through device memory once."""
        inputs = self.make_inputs(shape, 0, "meta", torch.float32)
        total = sum(_nbytes(v, elem) for v in inputs.values())
        init = self.init_inputs(shape)
        with torch.device("meta"):
            total += sum(_nbytes(p, elem) for p in self.module.Model(*init).parameters())
        out_shape, _ = self.output_spec(shape, torch.float32)
        n = 1
        for d in out_shape:
            n *= d
        return float(total + n * elem)

    def baselines(self, device: str) -> dict:
        """Model in eager mode and under torch.compile, on the inputs' dtype."""
        def eager(**inputs):
            return self.model(self.current_shape, device, _dtype_of(inputs))(*self._args(inputs))

        def build_compiled():
            compiled: dict = {}

            def run(**inputs):
                key = (tuple(sorted(self.current_shape.items())), _dtype_of(inputs))
                if key not in compiled:
                    compiled[key] = torch.compile(self.model(self.current_shape, device, key[1]))
                return compiled[key](*self._args(inputs))
            return run
        return {"eager": eager, "compile": LazyBaseline(build_compiled)}


MAX_PRELOADED = 64  # module names a file's import statements may have loaded ahead of the seal


def imported_modules(source: str) -> list[str]:
    """The absolute module names the file's import statements name, anywhere in it (`from a import b`
    names a and, in case it is a submodule, a.b), first MAX_PRELOADED of them."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]
    return list(dict.fromkeys(names))[:MAX_PRELOADED]


def _installed(top: str, roots: tuple[str, ...]) -> bool:
    """Whether the top-level module `top` is found under `roots` (or built in), without importing it."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    places = ([os.path.realpath(spec.origin)] if spec.origin and spec.has_location else []) + [
        os.path.join(os.path.realpath(p), "") for p in spec.submodule_search_locations or []]
    if not places:
        return spec.origin in ("built-in", "frozen")
    return all(p.startswith(roots) for p in places)


def preload_imports(source: str, roots: tuple[str, ...]) -> None:
    """In the candidate's process, before the seal: the installed modules the problem file imports.
    After the seal, problem code is as untrusted as the candidate's and may import no new module, so a
    file that imports one torch and Triton had not (`import einops`) would get every candidate sealed.
    Only modules found under `roots` (where installed code lives: seal.code_roots) load here, never one
    from the working folder or beside the problem, with the fences already up; the problem's own code
    runs after the seal. A name that does not import is the problem process's to report."""
    try:
        names = imported_modules(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    for name in names:
        try:
            if _installed(name.partition(".")[0], roots):
                importlib.import_module(name)
        except Exception:
            pass


def execute(name: str, tree: ast.Module, shape: dict[str, int]) -> types.ModuleType:
    """Run a problem file's top level with `shape`'s names pinned: after each statement a pinned name
    that exists is set back to its pinned value, before the next statement reads it."""
    plain = {k: v for k, v in shape.items() if "[" not in k}
    elements: dict[str, dict[int, int]] = {}
    for k, v in shape.items():
        if "[" in k:
            base, _, index = k.partition("[")
            elements.setdefault(base, {})[int(index.rstrip("]"))] = v
    module = types.ModuleType(f"marathon_problem_{name}")
    module.__file__ = f"<problem {name}>"
    ns = module.__dict__
    for stmt in tree.body:
        exec(compile(ast.Module(body=[stmt], type_ignores=[]), f"<problem {name}>", "exec"), ns)
        for k, v in plain.items():
            if k in ns:
                ns[k] = v
        for k, items in elements.items():
            if isinstance(ns.get(k), tuple):
                ns[k] = tuple(items.get(i, x) for i, x in enumerate(ns[k]))
    return module


class CandidateModel:
    """In the sandbox: the candidate's ModelNew, rebuilt (outside the clock and the torch-op monitor)
    when the shape changes, called with get_inputs()'s tensors in order."""

    def __init__(self, cls, reference: FileReference, device: str) -> None:
        self.cls, self.reference, self.device = cls, reference, device
        self.key = None
        self.model = None

    def prepare(self, shape: dict[str, int], dtype: torch.dtype) -> None:
        key = (tuple(sorted(shape.items())), dtype)
        if key != self.key:
            self.model = None  # the old model's memory goes first
            self.model = self.reference.build(self.cls, shape).to(device=self.device, dtype=dtype)
            self.key = key
        self.reference.use_shape(shape)

    def __call__(self, **inputs):
        with torch.no_grad():
            return self.model(*[inputs[f"{INPUT_PREFIX}{i}"] for i in range(len(inputs))])


def _cast(v, device, dtype):
    if not isinstance(v, torch.Tensor):
        return v
    return v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype)


def _nbytes(v, elem: int) -> int:
    if not isinstance(v, torch.Tensor):
        return 0
    return v.numel() * (elem if v.is_floating_point() else v.element_size())


def _dtype_of(inputs: dict) -> torch.dtype:
    return next((v.dtype for v in inputs.values() if isinstance(v, torch.Tensor) and v.is_floating_point()),
                torch.float32)


def _single(out, name: str) -> torch.Tensor:
    if isinstance(out, (tuple, list)) and len(out) == 1:
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise ProblemCodeError(f"problem {name}: Model.forward must return one tensor, not {type(out).__name__}")
    if out.is_complex():  # judged as real values only (the judge refuses it too): said before a run
        raise ProblemCodeError(f"problem {name}: Model.forward returns a {str(out.dtype).removeprefix('torch.')} "
                               "tensor; outputs are compared as real values: return torch.view_as_real(z)")
    return out

