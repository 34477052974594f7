"""The static policy check: an allowlist of what a candidate's source may say.

A candidate is a module of Triton kernels plus a thin torch launcher. The policy names what such a
module needs and rejects everything else, each refusal one line naming what it refused:

- syntax: the statement and expression forms an honest kernel module uses; no `match` (a class
  pattern reads attributes by name), no `global`/`nonlocal`, no generator functions, async or await;
- names: the builtins a launcher needs (range, len, min, isinstance, super, ...); no getattr, vars,
  type, object, open, exec; no dunder names; no rebinding of an imported module's name; classes are
  nn.Module subclasses (or plain classes) whose attributes are the candidate's own;
- API: the torch and triton names a candidate may touch (allocation, views, copies, casts, shapes,
  dtypes, devices, nn.Module/nn.Parameter, torch.cuda device queries and events; all of
  triton.language; triton.jit, cdiv, next_power_of_2, Config, autotune, heuristics without hooks),
  and the attribute names it may use on values: a public allowlist (tensor views and casts, shapes,
  triton.language tensor methods inside kernels) plus the names its own module defines.

The sandbox repeats the import check at run time (sys.modules)."""
from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
import io
import math
import re
import symtable
import tokenize
import types
from dataclasses import dataclass

MAX_SOURCE_BYTES = 256 * 1024
MAX_NESTING = 200  # syntax-tree depth; honest kernel modules stay far below it
MAX_REPORTED = 50  # refusals listed in a verdict

# Third-party kernel libraries: wrapping one is not writing the kernel.
BANNED_KERNEL_LIBRARIES = frozenset({
    "fla", "flash_attn", "flash_attn_interface", "xformers", "flashinfer", "flash_mla", "flashmla",
    "liger_kernel", "sgl_kernel", "vllm", "deep_gemm", "apex", "transformer_engine", "cutlass",
    "tilelang", "thunderkittens", "unsloth", "bitsandbytes", "mamba_ssm", "causal_conv1d", "kernels",
})

# --- syntax ----------------------------------------------------------------------------------------
ALLOWED_NODES = frozenset({
    ast.Module, ast.Expr, ast.Pass, ast.Break, ast.Continue, ast.Return, ast.Assign, ast.AugAssign,
    ast.AnnAssign, ast.Delete, ast.If, ast.For, ast.While, ast.With, ast.withitem, ast.Raise, ast.Try,
    ast.ExceptHandler, ast.Assert, ast.Import, ast.ImportFrom, ast.alias, ast.FunctionDef, ast.ClassDef,
    ast.arguments, ast.arg, ast.keyword, ast.Lambda,
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.NamedExpr, ast.Call, ast.Attribute,
    ast.Subscript, ast.Slice, ast.Starred, ast.Name, ast.Constant, ast.JoinedStr, ast.FormattedValue,
    ast.Tuple, ast.List, ast.Dict, ast.Set, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
    ast.comprehension, ast.Load, ast.Store, ast.Del,
    ast.And, ast.Or, ast.Add, ast.Sub, ast.Mult, ast.MatMult, ast.Div, ast.Mod, ast.Pow, ast.LShift,
    ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd, ast.FloorDiv, ast.Invert, ast.Not, ast.UAdd, ast.USub,
    ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In, ast.NotIn,
})
# Why the forms an attacker reaches for are refused (any other form is refused by its name).
REFUSED_NODES = {
    "Match": "a 'match' statement (a class pattern reads attributes by name)",
    "Global": "'global' (a candidate keeps no state between calls)",
    "Nonlocal": "'nonlocal' (rebinding an enclosing function's names)",
    "Yield": "a generator function (its frame leads to the caller's)",
    "YieldFrom": "a generator function (its frame leads to the caller's)",
    "Await": "'await' (coroutine frames)",
    "AsyncFunctionDef": "an async function (coroutine frames)",
    "AsyncFor": "'async for' (coroutine frames)",
    "AsyncWith": "'async with' (coroutine frames)",
    "TryStar": "'except*'",
}

# --- names -----------------------------------------------------------------------------------------
ALLOWED_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "callable", "chr", "dict", "divmod", "enumerate", "filter", "float",
    "frozenset", "hash", "hex", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max",
    "min", "next", "oct", "ord", "pow", "print", "range", "repr", "reversed", "round", "set", "slice",
    "sorted", "str", "sum", "super", "tuple", "zip",
    "ArithmeticError", "AssertionError", "Exception", "IndexError", "KeyError", "NotImplementedError",
    "OverflowError", "RuntimeError", "TypeError", "ValueError", "ZeroDivisionError",
})
# Module globals that exist without an assignment and are harmless to read.
ALLOWED_DUNDER_NAMES = frozenset({"__name__"})

# --- API -------------------------------------------------------------------------------------------
# Modules a candidate may import or name in an attribute chain (every module under triton.language too).
ALLOWED_MODULES = frozenset({  # (torch.nn.functional may be imported; none of its functions may be used)
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.cuda", "triton", "triton.tools", "triton.tools.tensor_descriptor",
    "math", "functools", "itertools", "operator", "typing", "dataclasses",
})
IMPORT_ROOTS = ("torch", "triton", "math", "functools", "itertools", "operator", "typing", "dataclasses")
TORCH_API = frozenset({
    # allocation and copies
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like", "torch.ones",
    "torch.ones_like", "torch.full", "torch.full_like", "torch.arange", "torch.tensor", "torch.as_strided",
    # random values (a file problem's ModelNew may draw its parameters as Model does; Model's are loaded)
    "torch.randn", "torch.rand", "torch.randint", "torch.randn_like", "torch.rand_like", "torch.randint_like",
    "torch.nn.init.uniform_", "torch.nn.init.normal_", "torch.nn.init.constant_", "torch.nn.init.ones_",
    "torch.nn.init.zeros_", "torch.nn.init.xavier_uniform_", "torch.nn.init.xavier_normal_",
    "torch.nn.init.kaiming_uniform_", "torch.nn.init.kaiming_normal_", "torch.nn.init.trunc_normal_",
    "torch.nn.init.calculate_gain",
    # types, shapes, devices
    "torch.Tensor", "torch.Size", "torch.device", "torch.dtype", "torch.finfo", "torch.iinfo", "torch.is_tensor",
    "torch.no_grad",
    # file problems: the candidate's module and the layers that hold Model's parameters (never called)
    "torch.nn.Module", "torch.nn.Parameter", "torch.nn.ModuleList", "torch.nn.Linear", "torch.nn.Bilinear",
    "torch.nn.Conv1d", "torch.nn.Conv2d", "torch.nn.Conv3d", "torch.nn.ConvTranspose1d", "torch.nn.ConvTranspose2d",
    "torch.nn.ConvTranspose3d", "torch.nn.LayerNorm", "torch.nn.RMSNorm", "torch.nn.GroupNorm",
    "torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d", "torch.nn.InstanceNorm1d",
    "torch.nn.InstanceNorm2d", "torch.nn.InstanceNorm3d", "torch.nn.Embedding", "torch.nn.PReLU",
    "torch.nn.Module.__init__",
    # the device a launcher runs on
    "torch.cuda.is_available", "torch.cuda.current_device", "torch.cuda.current_stream", "torch.cuda.device",
    "torch.cuda.device_count", "torch.cuda.synchronize", "torch.cuda.get_device_properties",
    "torch.cuda.get_device_capability", "torch.cuda.get_device_name", "torch.cuda.Event",
})
TRITON_API = frozenset({
    "triton.jit", "triton.cdiv", "triton.next_power_of_2", "triton.Config", "triton.autotune",
    "triton.heuristics", "triton.tools.tensor_descriptor.TensorDescriptor",
})
# Of triton.language: the builtin that links an LLVM bitcode library by a path the candidate names.
TRITON_LANGUAGE_REFUSED = frozenset({"extern_elementwise"})
STDLIB_API = frozenset({
    "functools.lru_cache", "functools.cache", "functools.partial", "functools.reduce",
    "itertools.product", "itertools.accumulate", "itertools.chain", "itertools.islice", "itertools.repeat",
    "itertools.combinations", "itertools.permutations", "itertools.zip_longest", "itertools.pairwise",
    "itertools.starmap", "itertools.count",
    "operator.add", "operator.sub", "operator.mul", "operator.truediv", "operator.floordiv", "operator.mod",
    "operator.neg", "operator.pow", "operator.and_", "operator.or_", "operator.xor", "operator.lshift",
    "operator.rshift", "operator.itemgetter", "operator.index",
    "typing.Optional", "typing.Tuple", "typing.List", "typing.Dict", "typing.Union", "typing.Any",
    "typing.Callable", "typing.Sequence", "typing.Iterable", "typing.Mapping", "typing.Literal",
    "dataclasses.dataclass", "dataclasses.field",
})
# Callables whose options run code of the candidate's or read files (pre_hook, prune_configs_by,
# perf_model, do_bench, ir_override, launch_metadata, repr): each may only be called directly, with
# these options; never taken as a value (where a later call could pass the others).
RESTRICTED_CALLS = {  # qualified name: (most positional arguments, keywords allowed)
    "triton.jit": (1, frozenset({"do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline"})),
    "triton.autotune": (2, frozenset({"configs", "key", "reset_to_zero", "restore_value", "warmup", "rep",
                                      "use_cuda_graph"})),
    "triton.Config": (5, frozenset({"kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg"})),
    "triton.heuristics": (1, frozenset({"values"})),
    "functools.lru_cache": (2, frozenset({"maxsize", "typed"})),
    "triton.language.constexpr": (1, frozenset()),  # a literal only: see _literal
}
# Of a library class, the members a candidate may name (a constructor); a class's other attributes are
# unbound methods, which take any object as self.
CLASS_MEMBERS = frozenset({"from_tensor"})
TRITON_DECORATORS = frozenset({"triton.jit", "triton.autotune", "triton.heuristics"})  # Triton re-reads what they decorate
DECORATORS = frozenset({"triton.jit", "triton.autotune", "triton.heuristics", "functools.lru_cache",
                        "functools.cache", "dataclasses.dataclass", "torch.no_grad"})
# Attribute names a candidate may use on values in its launcher: tensor views, copies, casts, shapes
# and queries; device and dtype fields; the parameter-holding layers' fields; events; containers.
HOST_ATTRIBUTES = frozenset({
    # torch.Tensor
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "T", "mT", "expand", "expand_as",
    "unsqueeze", "squeeze", "select", "split", "chunk", "unbind", "narrow", "flatten", "unflatten", "contiguous",
    "clone", "copy_", "to", "float", "half", "bfloat16", "double", "int", "long", "bool", "detach", "fill_", "zero_",
    "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided", "as_strided", "size", "stride", "shape",
    "dtype", "device", "numel", "dim", "ndim", "element_size", "itemsize", "nbytes", "is_contiguous", "is_cuda",
    "is_floating_point", "data_ptr", "storage_offset", "data", "requires_grad",
    # torch.device, torch.dtype, finfo/iinfo, device properties
    "type", "index", "is_floating_point", "is_signed", "max", "min", "eps", "tiny", "bits",
    "multi_processor_count", "total_memory", "major", "minor", "warp_size", "max_threads_per_multi_processor",
    "regs_per_multiprocessor", "shared_memory_per_block_optin", "L2_cache_size",
    # torch.nn layers that hold Model's parameters, and nn.Module
    "weight", "bias", "in_features", "out_features", "in_channels", "out_channels", "kernel_size", "padding",
    "dilation", "groups", "output_padding", "normalized_shape", "num_features", "num_groups", "num_channels",
    "running_mean", "running_var", "momentum", "num_embeddings", "embedding_dim", "padding_idx",
    "register_buffer", "register_parameter",
    # torch.cuda.Event / Stream
    "record", "wait", "query", "synchronize", "elapsed_time",
    # containers, strings, numbers, lru_cache
    "get", "items", "keys", "values", "setdefault", "update", "pop", "append", "extend", "insert", "count",
    "join", "startswith", "endswith", "lower", "upper", "strip", "replace", "bit_length", "is_integer",
    "cache_info", "cache_clear",
    # triton.Config's launch settings; TensorDescriptor's constructor
    "num_warps", "num_stages", "num_ctas", "maxnreg", "from_tensor",
})
# Of those, fields that are read, never called: a tensor's .max()/.min() compute, and Tensor.type(name)
# imports a module by name.
HOST_FIELDS = frozenset({"type", "max", "min"})
# Names that read the caller's memory or run code when used on a value; said plainly when refused.
ATTRIBUTE_REASONS = {
    "format": "str.format reads attributes named inside the string; use an f-string",
    "format_map": "str.format_map reads attributes named inside the string; use an f-string",
}
# Names others look up on a candidate's objects: Triton's launcher calls data_ptr() on its arguments
# (an object of the candidate's that has one runs its code inside the launch), and the sandbox asks
# the entry point for `prepare` and `reference` (a file problem's wrapper has them).
DUCK_TYPING_NAMES = frozenset({"data_ptr", "prepare", "reference"})


@dataclass
class PolicyViolation:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


# --- what the libraries' objects are called -------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _class_sources(filename: str) -> dict[str, set[str]]:
    """For each class defined in a source file: the names its methods assign on self."""
    try:
        with open(filename, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            out.setdefault(node.name, set()).update(
                n.attr for n in ast.walk(node)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self")
    return out


def _self_attributes(cls) -> set[str]:
    """Names a Python class (and its bases) assigns on self: instance attributes dir() cannot see."""
    names: set[str] = set()
    for klass in getattr(cls, "__mro__", ()):
        try:
            filename = inspect.getsourcefile(klass)
        except TypeError:  # a builtin class
            continue
        if filename:
            names |= _class_sources(filename).get(klass.__name__, set())
    return names


def _public(names) -> set[str]:
    return {n for n in names if not n.startswith("_")}


# Names that hand out what a launcher must not hold (a tensor's storage, numpy arrays and their raw
# pointers, its values as Python numbers, which its Python could compute with; autograd graph nodes and
# hooks, subclass views; an exception's failed object):
# a candidate's own attribute may not take one, or it could name them on such a value. (Its computing methods are left to the run-time
# monitor: an own attribute called `norm` lets x.norm() pass here and be rejected there.)
TENSOR_ESCAPES = frozenset({
    "numpy", "untyped_storage", "storage", "storage_type", "set_", "resize_", "resize_as_", "share_memory_",
    "pin_memory", "is_pinned", "register_hook", "register_post_accumulate_grad_hook", "grad_fn", "grad",
    "backward", "retain_grad", "apply_", "map_", "map2_", "as_subclass", "new", "record_stream", "tolist", "item",
    "obj",  # AttributeError.obj: the object a lookup inside a library failed on
})


@functools.lru_cache(maxsize=1)
def _library() -> tuple[frozenset[str], frozenset[str]]:
    """(KERNEL_ATTRIBUTES, FORBIDDEN_OWN_NAMES): the attribute names of triton.language's values (used
    inside @triton.jit functions); and the names a candidate's own attributes and methods may not take,
    the public attribute names of the triton runtime, torch.cuda, nn.Module and Python objects a candidate
    can reach (frames, code, cells, compiled kernels and their raw launchers, autotuner caches, ...),
    with torch.Tensor's escapes, where those names are not allowed anyway."""
    import torch
    import triton
    import triton.language as tl
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction, KernelParam

    core = tl.core
    kernel_classes = [core.tensor, core.dtype, core.pointer_type, core.block_type, core.constexpr, core.tuple]
    kernel_classes += [getattr(core, n) for n in ("tensor_descriptor", "tensor_descriptor_base", "slice")
                       if isinstance(getattr(core, n, None), type)]
    kernel: set[str] = set()
    for cls in kernel_classes:
        kernel |= _public(dir(cls)) | _public(_self_attributes(cls))
    kernel -= {"handle", "to_ir"}  # the compiler's (or the interpreter's) value behind a tensor

    reachable: list = [torch.device, torch.dtype, torch.Size, torch.finfo, torch.iinfo, torch.cuda.Event,
                       torch.cuda.Stream, torch.no_grad, JITFunction, KernelParam, Autotuner, Heuristics,
                       triton.Config, object, type, super, types.FunctionType, types.MethodType,
                       types.BuiltinFunctionType, types.ModuleType, types.CodeType, types.FrameType,
                       types.TracebackType, types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType,
                       types.CellType, types.MappingProxyType, BaseException, functools.partial, property,
                       classmethod, staticmethod]
    try:
        from triton.compiler.compiler import CompiledKernel
        reachable.append(CompiledKernel)
    except ImportError:  # pragma: no cover - another Triton layout
        pass
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
        reachable.append(TensorDescriptor)
    except ImportError:  # pragma: no cover - older Triton
        pass
    library: set[str] = set(TENSOR_ESCAPES)
    for cls in reachable:
        library |= _public(dir(cls))
        if _home(cls).startswith(("triton", "torch")):
            library |= _public(_self_attributes(cls))
    library |= _public(dir(functools.lru_cache()(lambda: None)))
    module = _public(dir(torch.nn.Module())) | _public(_self_attributes(torch.nn.Module))
    forbidden = ((library - HOST_ATTRIBUTES - kernel) | module | DUCK_TYPING_NAMES) - {"forward"}
    return frozenset(kernel), frozenset(forbidden)


def _taken(name: str) -> str:
    if name in DUCK_TYPING_NAMES:
        return "a name Triton or the sandbox looks up on a candidate's objects (yours would run in their place)"
    return "a name torch's, triton's or Python's objects have (it would stand in for theirs); call it something else"


def _forbidden_own_names() -> frozenset[str]:
    """Names a candidate's own attributes and methods may not take (see _library)."""
    return _library()[1]


# --- qualified names -------------------------------------------------------------------------------
def _home(obj) -> str:
    """The module an object of a library comes from (a JITFunction's is its function's)."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if type(obj).__module__.startswith("triton.runtime"):  # a JITFunction, or the interpreter's wrapper of one
        fn = getattr(obj, "fn", None)
        if isinstance(fn, types.FunctionType):
            return fn.__module__
    try:
        home = obj.__module__
    except Exception:  # noqa: BLE001 - instances of builtin types have none
        home = None
    return home if isinstance(home, str) else type(obj).__module__


@functools.lru_cache(maxsize=4096)
def _triton_language(qualified: str) -> tuple[str, object] | None:
    """("module" | "leaf", object) for a name under triton.language whose every step stays inside
    triton.language (all of it is the kernel language), else None."""
    import triton.language as tl
    obj = tl
    parts = qualified.split(".")
    for i, part in enumerate(parts[2:], start=3):
        try:
            obj = getattr(obj, part)
        except AttributeError:  # a submodule not imported yet (triton.language.extra.libdevice)
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                return None
        except Exception:  # noqa: BLE001 - not a name of triton.language
            return None
        plain = type(obj) in (int, float, str, bool, type(None))
        if not plain and not _home(obj).startswith("triton.language"):
            return None
        # a plain function must be one of the kernel language's own (not a helper that makes Python
        # code part of it, as builtin and extern do; libdevice's are stubs the compiler maps to the
        # device's library), and none links a library file by path
        if isinstance(obj, types.FunctionType) and not getattr(obj, "__triton_builtin__", False) \
                and obj.__module__ != "triton.language.extra.libdevice":
            return None
        if part in TRITON_LANGUAGE_REFUSED:
            return None
    return ("module" if isinstance(obj, types.ModuleType) else "leaf"), obj


def _kind(qualified: str) -> str | None:
    """"module" or "leaf" for a name a candidate may use, None for one it may not."""
    if qualified in ALLOWED_MODULES:
        return "module"
    if qualified == "triton.language" or qualified.startswith("triton.language."):
        found = _triton_language(qualified)
        return found[0] if found else None
    if qualified in TORCH_API or qualified in TRITON_API or qualified in STDLIB_API:
        return "leaf"
    root, _, rest = qualified.partition(".")
    if root == "torch" and "." not in rest:  # dtypes, memory formats, layouts: torch.bfloat16, torch.contiguous_format
        import torch
        return "leaf" if isinstance(getattr(torch, rest, None), (torch.dtype, torch.memory_format, torch.layout)) \
            else None
    if root == "math" and rest and "." not in rest:
        return "leaf" if not isinstance(getattr(math, rest, None), (types.ModuleType, type(None))) else None
    return None


@functools.lru_cache(maxsize=4096)
def _leaf_object(qualified: str):
    """The object an allowed name stands for (None where it cannot be looked up here)."""
    if qualified.startswith("triton.language."):
        found = _triton_language(qualified)
        return found[1] if found else None
    parts = qualified.split(".")
    try:
        obj = importlib.import_module(parts[0])
        for i, part in enumerate(parts[1:], start=2):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(".".join(parts[:i]))
    except Exception:  # noqa: BLE001 - not importable here: treated as a plain value
        return None
    return obj


def _restricted(qualified: str) -> str | None:
    """The restricted callable a qualified name is (by its canonical name), or None."""
    if qualified in RESTRICTED_CALLS:
        return qualified
    if qualified.startswith("triton.language."):
        found = _triton_language(qualified)
        import triton.language as tl
        if found and found[1] is tl.constexpr:
            return "triton.language.constexpr"
    return None


def _import_problem(module: str) -> str | None:
    root = module.split(".")[0]
    if root in BANNED_KERNEL_LIBRARIES:
        return f"imports {module!r}: third-party kernel libraries are not allowed; write the kernel in Triton"
    if root not in IMPORT_ROOTS:
        return f"imports {module!r}: only {', '.join(IMPORT_ROOTS)} may be imported"
    return None


def _api_refusal(qualified: str) -> str:
    root = qualified.split(".")[0]
    what = {"torch": "the torch API a candidate may use (allocation, views, copies, casts, shapes, dtypes, devices, "
                     "nn.Module/nn.Parameter, torch.cuda device queries and events); torch computes nothing here",
            "triton": "the triton API a candidate may use (triton.language, jit, cdiv, next_power_of_2, Config, "
                      "autotune, heuristics)"}.get(root, f"the part of {root} a candidate may use")
    return f"uses {qualified}: not in {what}"


def _literal(node: ast.AST) -> bool:
    """Numbers, strings, booleans, None, and tuples and arithmetic of them."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    if isinstance(node, ast.BinOp):
        return _literal(node.left) and _literal(node.right)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_literal(e) for e in node.elts)
    return False


# --- scopes ------------------------------------------------------------------------------------------
def _bound_names(node: ast.AST) -> set[str]:
    """Names a function, lambda or comprehension binds in its own scope (whatever the order: Python
    decides at compile time that such a name is local, so it never falls back to a builtin)."""
    names: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.Lambda)):
        a = node.args
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
            names.add(arg.arg)
        body = node.body if isinstance(node.body, list) else [node.body]
    else:  # a comprehension
        for gen in node.generators:
            names |= {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        body = [node]
    stack = list(body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            names.add(n.name)
            stack.extend(n.decorator_list + n.args.defaults + n.args.kw_defaults if isinstance(n, ast.FunctionDef)
                         else n.decorator_list + n.bases)
            continue
        if isinstance(n, ast.Lambda):
            stack.extend(n.args.defaults + n.args.kw_defaults)
            continue
        if isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) and n is not node:
            stack.append(n.generators[0].iter)
            names |= {w.target.id for w in ast.walk(n) if isinstance(w, ast.NamedExpr)}
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, ast.NamedExpr):
            names.add(n.target.id)
        stack.extend(ast.iter_child_nodes(n))
    return names


@dataclass
class _Scope:
    kind: str  # "module", "class", "function"
    bound: set[str]
    jit: bool = False  # a @triton.jit function (and what it holds)
    method_self: str | None = None  # the first parameter of a method of the candidate's class
    cls: str | None = None  # a class scope's class


class _Checker(ast.NodeVisitor):
    def __init__(self, tree: ast.Module, nodes: list[ast.AST], parents: dict[ast.AST, ast.AST]) -> None:
        self.violations: list[PolicyViolation] = []
        self.seen: set[tuple[int, str]] = set()
        self.nodes = nodes
        self.parents = parents
        self.imports: dict[str, str] = {}  # local name -> qualified module or object
        self.import_conflicts: set[str] = set()  # names imported as two different things
        self.classes: dict[str, set[str]] = {}  # the candidate's class -> its constants (literal class attributes)
        self.own: set[str] = set()  # attribute names the candidate's module defines
        self.scopes: list[_Scope] = [_Scope("module", set())]
        self.jit_functions: list[ast.FunctionDef] = []  # kernels (and what they hold), whose source Triton re-reads
        self.jit_names: set[str] = set()  # functions passed to triton.jit(...) by name
        self.annotation = 0  # > 0 inside an annotation
        self._collect(tree)

    def flag(self, node: ast.AST, message: str) -> None:
        key = (getattr(node, "lineno", 0), message)
        if key not in self.seen:
            self.seen.add(key)
            self.violations.append(PolicyViolation(*key))

    # -- what the module defines -----------------------------------------------------------------
    def _collect(self, tree: ast.Module) -> None:
        forbidden = _forbidden_own_names()
        for node in self.nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self._collect_import(node)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                data = set()
                for item in node.body:
                    names = ([item.name] if isinstance(item, ast.FunctionDef) else
                             [t.id for t in getattr(item, "targets", [getattr(item, "target", None)])
                              if isinstance(t, ast.Name)])
                    if isinstance(item, (ast.Assign, ast.AnnAssign)) and item.value is not None \
                            and _literal(item.value):
                        data.update(names)  # a constant; never a method under another name
                    self.own.update(n for n in names if not n.startswith("_") and n not in forbidden)
                self.classes[node.name] = data
        for node in self.nodes:
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if not node.attr.startswith("_") and node.attr not in forbidden:
                    self.own.add(node.attr)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("register_buffer", "register_parameter") and node.args
                  and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                name = node.args[0].value
                if name.isidentifier() and not name.startswith("_") and name not in forbidden:
                    self.own.add(name)

    def _collect_import(self, node: ast.Import | ast.ImportFrom) -> None:
        bound = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound.append((alias.asname or alias.name.split(".")[0],
                              alias.name if alias.asname else alias.name.split(".")[0]))
        elif not node.level and node.module:
            bound = [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names if a.name != "*"]
        for name, qualified in bound:
            if self.imports.get(name, qualified) != qualified:
                self.import_conflicts.add(name)
            self.imports[name] = qualified

    # -- traversal -------------------------------------------------------------------------------
    def visit(self, node: ast.AST):
        if type(node) not in ALLOWED_NODES:
            return None  # refused by the syntax pass; nothing inside it runs
        return super().visit(node)

    def _visit_all(self, nodes) -> None:
        for n in nodes:
            if n is not None:
                self.visit(n)

    def _annotation(self, node: ast.AST | None) -> None:
        if node is not None:
            self.annotation += 1
            self.visit(node)
            self.annotation -= 1

    @property
    def scope(self) -> _Scope:
        return self.scopes[-1]

    def _function_bound(self, name: str) -> bool:
        """Is `name` bound in an enclosing function-like scope (module and class scopes are dict
        lookups that fall back to builtins, so a binding there does not shadow one)?"""
        return any(s.kind == "function" and name in s.bound for s in self.scopes)

    def _method_self(self) -> str | None:
        for s in reversed(self.scopes):
            if s.method_self:
                return s.method_self
            if s.kind == "class":
                return None
        return None

    # -- syntax that needs a closer look ------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            problem = _import_problem(alias.name) or (
                None if _kind(alias.name) == "module" else _api_refusal(alias.name).replace("uses", "imports", 1))
            if problem:
                self.flag(node, problem)
            self._bind(node, alias.asname or alias.name.split(".")[0], imported=True)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(node, "relative imports are not allowed: a candidate is a single module")
            return
        module = node.module or ""
        if module == "__future__":
            for alias in node.names:
                if alias.name != "annotations":
                    self.flag(node, f"'from __future__ import {alias.name}' is not allowed")
            return
        problem = _import_problem(module)
        if problem:
            self.flag(node, problem)
            return
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, f"'from {module} import *' is not allowed: name what you use")
                continue
            qualified = f"{module}.{alias.name}"
            if alias.name.startswith("_"):
                self.flag(node, f"imports {qualified!r}: private and dunder names are not allowed")
            elif _kind(qualified) is None:
                self.flag(node, _api_refusal(qualified).replace("uses", "imports", 1))
            self._bind(node, alias.asname or alias.name, imported=True)

    def _decorator_problem(self, dec: ast.AST) -> str | None:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = self._qualified(target)
        if name is None or name not in DECORATORS:
            return f"decorator {ast.unparse(target)!r}: only {', '.join(sorted(DECORATORS))} may decorate"
        return None

    def _is_jit(self, node: ast.FunctionDef) -> bool:
        return any(self._qualified(d.func if isinstance(d, ast.Call) else d) == "triton.jit"
                   for d in node.decorator_list)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for dec in node.decorator_list:
            problem = self._decorator_problem(dec)
            if problem:
                self.flag(dec, problem)
        self._visit_all(node.decorator_list)
        jit = self._is_jit(node) or self.scope.jit
        if jit or any(self._qualified(d.func if isinstance(d, ast.Call) else d) in TRITON_DECORATORS
                      for d in node.decorator_list):
            self.jit_functions.append(node)
        defaults = node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
        if jit:
            for d in defaults:  # Triton evaluates a kernel's defaults itself, with every global in reach
                if not (_literal(d) or self._qualified(d) is not None or isinstance(d, ast.Name)):
                    self.flag(d, f"default {ast.unparse(d)!r} of a @triton.jit function: only literals and names")
        self._visit_all(defaults)
        a = node.args
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
            self._annotation(arg.annotation)
        self._annotation(node.returns)
        self._bind(node, node.name)
        in_class = self.scope.kind == "class"
        if in_class:
            self._class_member(node, node.name)
        params = [x.arg for x in a.posonlyargs + a.args]
        method_self = params[0] if in_class and params else None
        scope = _Scope("function", _bound_names(node), jit=jit, method_self=method_self)
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
            self._bind(arg, arg.arg)
        if method_self:
            self._check_self_not_rebound(node, (a.posonlyargs + a.args)[0])
        self.scopes.append(scope)
        self._visit_all(node.body)
        self.scopes.pop()

    def _check_self_not_rebound(self, method: ast.FunctionDef, first: ast.arg) -> None:
        name = first.arg
        for n in ast.walk(method):
            if n is method:
                continue
            rebinds = ((isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)) and n.id == name)
                       or (isinstance(n, ast.arg) and n.arg == name and n is not first)
                       or (isinstance(n, ast.ExceptHandler) and n.name == name)
                       or (isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name))
            if rebinds:
                self.flag(n, f"rebinds {name!r}, the method's own object: {name}.<attribute> must always be "
                             "an instance of the candidate's class")

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_all(node.args.defaults + [d for d in node.args.kw_defaults if d is not None])
        for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            self._bind(arg, arg.arg)
        self.scopes.append(_Scope("function", _bound_names(node), jit=self.scope.jit))
        self.visit(node.body)
        self.scopes.pop()

    def _comprehension(self, node) -> None:
        first = node.generators[0]
        self.visit(first.iter)  # evaluated in the enclosing scope
        self.scopes.append(_Scope("function", _bound_names(node), jit=self.scope.jit))
        for i, gen in enumerate(node.generators):
            if gen.is_async:
                self.flag(node, "an async comprehension is not allowed")
            self.visit(gen.target)
            if i:
                self.visit(gen.iter)
            self._visit_all(gen.ifs)
        if isinstance(node, ast.DictComp):
            self.visit(node.key)
            self.visit(node.value)
        else:
            self.visit(node.elt)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if len(self.scopes) > 1:
            self.flag(node, f"class {node.name} is not at the top level: a candidate's classes are module-level")
        for dec in node.decorator_list:
            problem = self._decorator_problem(dec)
            if problem:
                self.flag(dec, problem)
        self._visit_all(node.decorator_list)
        for kw in node.keywords:
            self.flag(node, f"class {node.name}({kw.arg}=...): class keywords (metaclass, ...) are not allowed")
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) and base.id in self.classes else self._qualified(base)
            if name not in ("torch.nn.Module",) and name not in self.classes:
                self.flag(base, f"class {node.name}({ast.unparse(base)}): a candidate's class derives from "
                                "torch.nn.Module or one of its own classes")
            if isinstance(base, ast.Name) and base.id in self.classes:
                continue  # the class's own name as a base: allowed
            self.visit(base)
        self._bind(node, node.name)
        self.scopes.append(_Scope("class", set(), cls=node.name))
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                self.visit(item)
            elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                for target in (item.targets if isinstance(item, ast.Assign) else [item.target]):
                    if isinstance(target, ast.Name):
                        self._class_member(target, target.id)
                    else:
                        self.flag(target, f"class {node.name}: only plain names may be assigned in a class body")
                self.visit(item)
            elif isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant):
                pass  # a docstring
            elif not isinstance(item, ast.Pass):
                self.flag(item, f"class {node.name}: a class body holds methods, assignments and a docstring")
        self.scopes.pop()

    def _class_member(self, node: ast.AST, name: str) -> None:
        if name == "__init__":
            return
        if name.startswith("_"):
            self.flag(node, f"class member {name!r}: a class's private and dunder members (hooks Python and the "
                            "judge call: __torch_function__, __del__, __eq__, ...) are not allowed; only __init__")
        elif name in _forbidden_own_names() and name != "forward":
            self.flag(node, f"class member {name!r}: {_taken(name)}")

    # -- names -------------------------------------------------------------------------------------
    def _bind(self, node: ast.AST, name: str, imported: bool = False) -> None:
        if name == "__init__" and isinstance(node, ast.FunctionDef) and self.scope.kind == "class":
            pass  # a constructor
        elif name.startswith("__") and name.endswith("__"):
            self.flag(node, f"binds {name!r}: dunder names are not allowed")
        if imported and name in self.import_conflicts:
            self.flag(node, f"imports two different things as {name!r}: an imported name means one thing")
        if not imported and name in self.imports:
            self.flag(node, f"rebinds {name!r}, the name of an import: an imported name always means the import")
        if name in self.classes and not isinstance(node, ast.Name) \
                and not (isinstance(node, ast.ClassDef) and node.name == name and self.scope.kind == "module"):
            self.flag(node, f"rebinds {name!r}, the name of the candidate's class")

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._bind(node, node.id)
            if node.id in self.classes:
                self.flag(node, f"rebinds {node.id!r}, the name of the candidate's class")
            return
        name = node.id
        if name.startswith("__") and name.endswith("__"):
            if name not in ALLOWED_DUNDER_NAMES:
                self.flag(node, f"uses {name!r}: dunder names are not allowed")
            return
        if name in self.imports:
            self._use_qualified(node, self.imports[name])
            return
        if name in self.classes:
            self._use_class(node, name)
            return
        if hasattr(builtins, name) and name not in ALLOWED_BUILTINS and not self._function_bound(name):
            self.flag(node, f"uses {name!r}: not a builtin a candidate may use "
                            f"(those are {', '.join(sorted(n for n in ALLOWED_BUILTINS if n.islower()))} "
                            "and the common exceptions)")
        if name == "super":
            parent = self.parents.get(node)
            if not (isinstance(parent, ast.Call) and parent.func is node and not parent.keywords
                    and (not parent.args or self._own_super_args(parent.args))):
                self.flag(node, "super: only as super() or super(ThisClass, self), in a method of the candidate's class")

    def _own_super_args(self, args: list[ast.AST]) -> bool:
        """super(ThisClass, self): the enclosing class and the method's own object."""
        owner = next((s.cls for s in reversed(self.scopes) if s.kind == "class"), None)
        return (len(args) == 2 and isinstance(args[0], ast.Name) and args[0].id == owner
                and isinstance(args[1], ast.Name) and args[1].id == self._method_self())

    def _class_context(self, node: ast.AST) -> bool:
        """Is a class named where a class belongs: called, derived from, an isinstance argument, an
        annotation? Anywhere else it is a value, whose unbound methods take any object as self."""
        parent = self.parents.get(node)
        if isinstance(parent, ast.Tuple):
            parent = self.parents.get(parent)
        return bool(self.annotation
                    or (isinstance(parent, ast.Call) and (parent.func is node or (
                        isinstance(parent.func, ast.Name) and parent.func.id in ("isinstance", "issubclass", "super"))))
                    or isinstance(parent, ast.ClassDef))

    def _use_class(self, node: ast.Name, name: str) -> None:
        """The candidate's class: instantiated, derived from, tested with isinstance or read for a data
        attribute; never taken as a value (whose methods could then be called with a foreign self)."""
        parent = self.parents.get(node)
        ok = (self._class_context(node)
              or (isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in self.classes[name]))
        if not ok:
            self.flag(node, f"uses class {name} as a value: a candidate's class may be instantiated, derived from, "
                            "tested with isinstance, or read for a literal class attribute (never its methods)")

    # -- attributes --------------------------------------------------------------------------------
    def _qualified(self, node: ast.AST) -> str | None:
        """torch.cuda.x for an attribute chain rooted at an imported name, else None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.imports:
            return ".".join([self.imports[node.id], *reversed(parts)])
        return None

    def _use_qualified(self, node: ast.AST, qualified: str) -> None:
        """A whole attribute chain rooted at an import (`node` is its outermost node)."""
        if _import_problem(qualified):
            return  # its import was refused already
        parts = qualified.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if any(p.startswith("_") for p in parts[1:i]) and prefix != "torch.nn.Module.__init__":
                self.flag(node, f"uses {qualified}: private and dunder names are not allowed")
                return
            kind = _kind(prefix)
            if kind == "module":
                continue
            if kind is None:
                self.flag(node, _api_refusal(prefix))
                return
            # a leaf: what follows is an attribute of a value
            if qualified == "torch.nn.Module.__init__":  # nn.Module.__init__(self), the old spelling of super()
                call = self.parents.get(node)
                if not (isinstance(call, ast.Call) and call.func is node and call.args
                        and isinstance(call.args[0], ast.Name) and call.args[0].id == self._method_self()):
                    self.flag(node, "nn.Module.__init__: only as nn.Module.__init__(self) in a method")
                return
            restricted = _restricted(prefix)
            if restricted:
                if i == len(parts):
                    self._use_restricted(node, restricted)
                else:
                    self.flag(node, f"uses {qualified}: only {prefix}(...) itself")
                return
            if isinstance(_leaf_object(prefix), type):  # a library class: as the candidate's own classes
                if i == len(parts) and not self._class_context(node):
                    self.flag(node, f"uses the class {prefix} as a value: a class may be called, derived from, "
                                    "tested with isinstance or named in an annotation")
                elif i < len(parts) and parts[i] not in CLASS_MEMBERS:
                    self.flag(node, f"uses {'.'.join(parts[:i + 1])}: of a class, only "
                                    f"{', '.join(sorted(CLASS_MEMBERS))} (its methods take any object as self)")
                for attr in parts[i + 1:]:
                    self._check_value_attribute(node, attr, called=False)
                return
            for attr in parts[i:]:
                self._check_value_attribute(node, attr, called=False)
            return
        if not (isinstance(node, ast.Name) and isinstance(self.parents.get(node), (ast.Import, ast.ImportFrom))):
            self.flag(node, f"uses the module {qualified} as a value: name what you use from it ({qualified}.x)")

    def _use_restricted(self, node: ast.AST, qualified: str) -> None:
        parent = self.parents.get(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            self._check_restricted_call(parent, qualified)
        elif isinstance(parent, ast.FunctionDef) and node in parent.decorator_list:
            pass  # a bare decorator: no options
        elif self.annotation and qualified == "triton.language.constexpr":
            pass
        else:
            self.flag(node, f"uses {qualified} as a value: it may only be called (or decorate) directly, so that "
                            "its options can be checked")

    def _check_restricted_call(self, call: ast.Call, qualified: str) -> None:
        most, allowed = RESTRICTED_CALLS[qualified]
        if qualified == "triton.jit":
            self.jit_names.update(a.id for a in call.args if isinstance(a, ast.Name))
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            self.flag(call, f"{qualified}(*..., **...): pass its options by name")
        if len(call.args) > most:
            self.flag(call, f"{qualified}: at most {most} positional argument(s); pass the rest by name")
        for kw in call.keywords:
            if kw.arg is not None and kw.arg not in allowed:
                self.flag(kw.value, f"{qualified}({kw.arg}=...): not allowed (its options here: "
                                    f"{', '.join(sorted(allowed)) or 'none'}); hooks and callbacks run outside "
                                    "the judge's watch")
        if qualified == "triton.language.constexpr" and not all(_literal(a) for a in call.args):
            self.flag(call, "tl.constexpr(...) of something other than a literal: a kernel may call what it wraps")

    def _check_value_attribute(self, node: ast.AST, attr: str, called: bool) -> None:
        kernel = _library()[0]
        if attr.startswith("_"):
            self.flag(node, f"attribute {attr!r}: private and dunder attributes are not allowed")
        elif attr in ATTRIBUTE_REASONS:
            self.flag(node, f"attribute {attr!r}: {ATTRIBUTE_REASONS[attr]}")
        elif attr == "type" and called:
            self.flag(node, "attribute 'type' called: Tensor.type(name) imports by name; use .to(dtype)")
        elif attr in HOST_FIELDS and called and not self.scope.jit and attr not in self.own:
            self.flag(node, f"attribute {attr!r} called: torch computes nothing in a launcher (finfo(...).{attr} "
                            "is a field, x.{attr}() a reduction)")
        elif not (attr in self.own or attr in (kernel if self.scope.jit else HOST_ATTRIBUTES)):
            where = "in a @triton.jit function" if self.scope.jit else "in a launcher"
            self.flag(node, f"attribute {attr!r}: not an attribute a candidate may use {where} "
                            "(views, copies, casts, shapes, dtypes and devices of tensors; the names its own "
                            "module defines)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parent = self.parents.get(node)
        qualified = self._qualified(node)
        if qualified is not None:  # a chain rooted at an import: its outermost link checks all of it
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                self.flag(node, f"assigns to {qualified}: patching imported modules is not allowed")
            elif not (isinstance(parent, ast.Attribute) and parent.value is node):
                self._use_qualified(node, qualified)
            return
        if (node.attr == "__init__" and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "super" and isinstance(node.ctx, ast.Load)):
            self.visit(node.value)
            return
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._store_attribute(node)
        else:
            called = isinstance(parent, ast.Call) and parent.func is node
            self._check_value_attribute(node, node.attr, called)
            if node.attr == "type" and not called and not (
                    (isinstance(node.value, ast.Attribute) and node.value.attr == "device")
                    or (isinstance(parent, ast.Attribute) and parent.value is node)):
                self.flag(node, "attribute 'type': only as x.device.type or x.type.<field> (Tensor.type(name) "
                                "imports a module by name)")
        self.visit(node.value)

    def _store_attribute(self, node: ast.Attribute) -> None:
        owner = self._method_self()
        if not (isinstance(node.value, ast.Name) and owner and node.value.id == owner):
            self.flag(node, f"assigns to attribute {node.attr!r}: patching objects is not allowed "
                            "(only self.<name> in a method of the candidate's own class)")
        elif node.attr.startswith("_"):
            self.flag(node, f"assigns to attribute {node.attr!r}: private and dunder attributes are not allowed")
        elif node.attr in _forbidden_own_names():
            self.flag(node, f"assigns to attribute {node.attr!r}: {_taken(node.attr)}")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = node.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.imports:
                self.flag(node, "assigns into an imported module's object: patching imported modules is not allowed")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        self._annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind(node, node.name)
        if node.type is not None:
            self.visit(node.type)
        self._visit_all(node.body)


def _syntax(tree: ast.AST) -> list[PolicyViolation]:
    """Every node of a form the policy does not allow (its insides are not looked at further)."""
    out: list[PolicyViolation] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if type(node) not in ALLOWED_NODES:
            name = type(node).__name__
            what = REFUSED_NODES.get(name, f"the {name} form")
            out.append(PolicyViolation(getattr(node, "lineno", 0), f"{what}: not allowed in a candidate"))
            continue
        stack.extend(ast.iter_child_nodes(node))
    return sorted(out, key=lambda v: v.line)


def _index(tree: ast.AST) -> tuple[list[ast.AST], dict[ast.AST, ast.AST], int]:
    """Every node, each node's parent, and the tree's depth (walked no deeper than MAX_NESTING + 1)."""
    nodes: list[ast.AST] = []
    parents: dict[ast.AST, ast.AST] = {}
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        nodes.append(node)
        deepest = max(deepest, depth)
        if depth <= MAX_NESTING:
            for child in ast.iter_child_nodes(node):
                parents[child] = node
                stack.append((child, depth + 1))
    return nodes, parents, deepest


def check_source(source: str, entry_point: str) -> list[PolicyViolation]:
    """Every policy violation in `source`, or [] if it may run."""
    if len(source.encode()) > MAX_SOURCE_BYTES:
        return [PolicyViolation(0, f"source is {len(source.encode())} bytes; the limit is {MAX_SOURCE_BYTES}")]
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [PolicyViolation(exc.lineno or 0, f"syntax error: {exc.msg}")]
    except RecursionError:
        return [PolicyViolation(0, "the source nests too deeply to parse")]
    nodes, parents, depth = _index(tree)
    if depth > MAX_NESTING:
        return [PolicyViolation(0, f"the source nests {depth} levels deep; the limit is {MAX_NESTING}")]
    violations = _syntax(tree)
    checker = _Checker(tree, nodes, parents)
    try:
        checker.visit(tree)
    except RecursionError:
        return [PolicyViolation(0, "the source nests too deeply to check")]
    violations += sorted(checker.violations, key=lambda v: v.line)
    kernels = checker.jit_functions + [n for n in nodes if isinstance(n, ast.FunctionDef) and n.name in checker.jit_names]
    violations += _source_confusion(source, kernels)
    violations += _unbound_names(source, nodes)
    violations += _vendored(source, nodes)
    if len(violations) > MAX_REPORTED:
        violations = violations[:MAX_REPORTED] + [PolicyViolation(0, f"and {len(violations) - MAX_REPORTED} more")]
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    if entry_point not in defined:
        violations.append(PolicyViolation(0, f"the module must define {entry_point}(...) at top level"))
    return violations


# --- names the module does not bind ---------------------------------------------------------------------
# A name the candidate reads must be one its own code binds (in the scope Python will look it up in: the
# function, an enclosing function, the module) or a builtin: a module global that something else put
# there is not the candidate's to read (Triton's CPU interpreter copies its own module's globals, numpy
# among them, into the module of every kernel it runs). Scopes as Python resolves them (symtable).
def _unbound_names(source: str, nodes: list[ast.AST]) -> list[PolicyViolation]:
    try:
        top = symtable.symtable(source, "<candidate>", "exec")
    except (SyntaxError, RecursionError, ValueError):
        return []  # the parse above stands for these
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    unbound: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        for sym in table.get_symbols():
            name = sym.get_name()
            looked_up_globally = sym.is_global() or (table is top and name not in bound)
            if (sym.is_referenced() and looked_up_globally and name not in bound and not hasattr(builtins, name)
                    and name not in ALLOWED_DUNDER_NAMES):
                unbound.add(name)
    out = []
    for name in sorted(unbound):
        line = min((n.lineno for n in nodes if isinstance(n, ast.Name) and n.id == name), default=0)
        out.append(PolicyViolation(line, f"reads {name!r}, which the module never binds: a candidate reads only "
                                         "names its own code defines, imports or assigns, and builtins"))
    return out


# --- strings that Triton's line scanners would take for code ---------------------------------------------
# Triton does not compile a kernel from the parsed function: it re-reads the function's source lines and
# cuts them by text (the JIT from the first line matching `^def name(` after the decorators, the CPU
# interpreter from the last line whose stripped text starts with `def `). A string whose text spans
# lines can hold such a line, and its text is then the kernel that runs, which the rest of this policy
# saw only as a constant. (The sandbox holds what Triton reads to the checked source as well.)
_CODE_LINE = re.compile(r"(def\s|@)")


def _string_spans(source: str) -> list[tuple[int, int]] | None:
    """(first line, last line) of every string literal (an f-string whole) whose text spans lines;
    None if the source does not tokenize."""
    spans: list[tuple[int, int]] = []
    fstrings: list[int] = []  # Python 3.12+: an f-string is FSTRING_START ... FSTRING_END
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            name = tokenize.tok_name.get(tok.type)
            if tok.type == tokenize.STRING and tok.start[0] != tok.end[0]:
                spans.append((tok.start[0], tok.end[0]))
            elif name == "FSTRING_START":
                fstrings.append(tok.start[0])
            elif name == "FSTRING_END" and fstrings:
                first = fstrings.pop()
                if first != tok.end[0]:
                    spans.append((first, tok.end[0]))
    except (tokenize.TokenError, SyntaxError):
        return None
    return spans


def _docstring_lines(node: ast.FunctionDef) -> tuple[int, int] | None:
    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.lineno, first.end_lineno or first.lineno
    return None


def _source_confusion(source: str, kernels: list[ast.FunctionDef]) -> list[PolicyViolation]:
    """Strings spanning lines where Triton's line scanners would read them: inside a kernel or its
    decorators (a kernel's own docstring aside), or holding, anywhere, a line that begins with `def ` or `@`."""
    spans = _string_spans(source)
    if spans is None:
        return [PolicyViolation(0, "the source does not tokenize: Triton reads kernels' source by lines")]
    lines = source.splitlines()
    out: list[PolicyViolation] = []
    for first, last in spans:
        for n in range(first + 1, min(last, len(lines)) + 1):
            if _CODE_LINE.match(lines[n - 1].strip()):
                out.append(PolicyViolation(n, "a string spanning lines holds a line beginning with 'def ' or '@': "
                                              "Triton finds a kernel's code by scanning source lines and would take "
                                              "the string's text for the kernel"))
                break
    docstrings = {d for d in map(_docstring_lines, kernels) if d is not None}
    reported: set[tuple[int, int]] = set()
    for kernel in kernels:
        top = min([kernel.lineno] + [d.lineno for d in kernel.decorator_list])
        bottom = kernel.end_lineno or kernel.lineno
        for first, last in spans:
            if first > bottom or last < top or (first, last) in reported:
                continue
            if any(a <= first and last <= b for a, b in docstrings):
                continue
            reported.add((first, last))
            out.append(PolicyViolation(first, f"a string spanning lines {first}-{last} in Triton function "
                                              f"{kernel.name!r} or its decorators: Triton re-reads a kernel's source "
                                              "by lines, so only its docstring may span lines there (use # comments)"))
    return sorted(out, key=lambda v: v.line)


# --- vendored kernel libraries ------------------------------------------------------------------------
# Identifiers characteristic of third-party kernel libraries: source pasted in ("vendored") from
# them is as much a wrapper as an import. Two distinct hits, or one library header, reject a source.
VENDORED_SIGNATURES = {
    "fla (flash-linear-attention)": frozenset({
        "chunk_kda_fwd_kernel_intra_sub_inter", "chunk_kda_fwd_kernel_intra_sub_intra", "chunk_kda_fwd_intra",
        "chunk_kda_fwd_intra_token_parallel", "chunk_kda_bwd_kernel_intra", "chunk_gated_delta_rule_fwd_kernel_h",
        "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "chunk_gated_delta_rule_fwd_h", "recompute_w_u_fwd",
        "recompute_w_u_fwd_kernel", "chunk_gla_fwd_o_gk", "chunk_gla_fwd_kernel_o", "chunk_fwd_kernel_o",
        "fused_recurrent_kda_fwd_kernel", "fused_recurrent_gated_delta_rule_fwd_kernel", "chunk_local_cumsum",
        "chunk_local_cumsum_vector_kernel", "chunk_local_cumsum_scalar_kernel", "solve_tril",
        "solve_tril_16x16_kernel", "merge_16x16_to_64x64_inverse_kernel", "prepare_chunk_indices",
        "prepare_chunk_offsets", "autotune_cache_kwargs", "input_guard", "kda_gate_fwd_kernel",
        "chunk_kda_fwd", "ChunkKDAFunction",
    }),
    "sglang / vllm (Triton decode attention)": frozenset({
        "_fwd_grouped_kernel_stage1", "_fwd_kernel_stage1", "_fwd_kernel_stage2", "_decode_softmax_reducev_fwd",
        "_decode_grouped_att_m_fwd", "_decode_att_m_fwd", "decode_attention_fwd_grouped",
        "decode_attention_fwd_normal", "decode_attention_fwd", "Req_to_tokens", "B_Seqlen", "Att_Out",
    }),
    "flash-attention (Triton)": frozenset({
        "_flash_attn_forward", "_flash_attn_backward", "flash_attn_func", "flash_attn_with_kvcache",
        "_bwd_preprocess_do_o_dot", "_bwd_kernel_one_col_block",
    }),
}
# A copyright or licence line naming one of these is a pasted file's header.
VENDORED_HEADERS = ("Songlin Yang", "Yu Zhang", "flash-linear-attention", "fla-org", "Tri Dao",
                    "SGLang Team", "vLLM Team", "vLLM project", "FlashInfer", "sgl-project", "vllm-project")


def _vendored(source: str, nodes: list[ast.AST]) -> list[PolicyViolation]:
    """Source pasted in from a third-party kernel library: its identifiers and headers give it away."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)
    out = []
    for library, signature in VENDORED_SIGNATURES.items():
        hits = sorted(names & signature)
        if len(hits) >= 2:
            out.append(PolicyViolation(0, f"looks vendored from {library} (identifiers {', '.join(hits[:6])}): "
                                          "pasting a library's kernels in is wrapping it; write your own"))
    comments = [line for line in source.splitlines()
                if line.lstrip().startswith("#") and ("Copyright" in line or "SPDX" in line or "(c)" in line)]
    header = next((h for h in VENDORED_HEADERS for line in comments if h in line), None)
    if header:
        out.append(PolicyViolation(0, f"looks vendored: a copyright line names {header!r}, of a kernel library; "
                                      "pasting a library's kernels in is wrapping it"))
    return out


def module_violation(name: str) -> str | None:
    """For the run-time check: why a module that appeared in sys.modules is not allowed, or None."""
    root = name.split(".")[0]
    if root in BANNED_KERNEL_LIBRARIES:
        return f"module {name!r} was loaded: third-party kernel libraries are not allowed"
    return None
