"""The candidate's process. The judge starts it in a scratch directory, in its own process group,
with a clean environment and resource limits; it is the only place candidate code ever runs.

It reports facts (which kernels launched, which torch ops ran, whether the output is a plain new
tensor, whether inputs changed) as JSON lines on a dedicated pipe; it decides nothing. Inputs are made
here, on the device, from the seed each command names (the problem's own make_inputs, as the judge's
reference's are made); outputs go back as files; the reference never enters this process."""
from __future__ import annotations

import argparse
import array
import ast
import collections
import functools
import importlib
import importlib.util
import inspect
import itertools
import json
import math
import os
import resource
import secrets
import sys
import threading
import time
import traceback
import types
import warnings

import torch
import triton
import triton.language as tl
from torch.utils import _python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime.jit import JITCallable, JITFunction, KernelInterface

from kernels.evaluator import confinement, policy, protocol, seal, tensor_file, timing
from kernels.evaluator import fences as sandbox_fences
from kernels.evaluator.protocol import (ArmedReply, BeginRecord, CalledReply, CallFacts, CandidateReadyReply, EndRecord,
                                        ErrorReply, FencedReply, FiredReply, ForgotReply, LaunchRecord, OpRecord,
                                        PongReply, ProbeRecord, SavedReply, SuspendRecord, ThreadRecord,
                                        TimedReply)

CANDIDATE_MODULE = "candidate"
KEPT_BYTES = 8 * 2**30  # recent outputs kept alive (their memory not reused by a later call), at most
# aten ops that only allocate, move, view or cast data: everything else is computation, which must
# happen in the candidate's own Triton kernels. A tensor's values read into Python (item, float, int,
# bool, an index: aten._local_scalar_dense) are not among them: the launcher's Python would compute.
DATA_MOVEMENT_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "full", "full_like", "new_full", "ones", "ones_like",
    "new_ones", "fill_", "zero_", "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided",
    "permute", "transpose", "t", "expand", "unsqueeze", "squeeze", "select", "slice", "split",
    "split_with_sizes", "chunk", "unbind", "narrow", "contiguous", "clone", "copy_", "_to_copy",
    "to", "detach", "alias", "lift_fresh", "lift_fresh_copy", "view_as", "flatten", "unflatten",
    "arange", "record_stream", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "is_contiguous", "is_same_size", "dim", "numel", "size", "stride", "set_",
})
# Allocations whose memory the candidate gets uninitialised: filled with the call's poison byte.
ALLOCATION_OPS = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                            "new_empty_strided"})
try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton
    TensorDescriptor = None
try:
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # a CPU-only build
    _raw_stream = None
try:
    from triton.runtime.interpreter import FunctionRewriter, InterpretedFunction
except ImportError:  # pragma: no cover - older Triton
    FunctionRewriter = InterpretedFunction = None


class Channel:
    """The reply channel: protocol messages as JSON lines carrying this run's nonce, each written whole
    by os.write under a lock (record lines come from whatever thread launches a kernel or runs a torch op)."""

    def __init__(self, fd: int, nonce: str) -> None:
        self.fd, self.nonce = fd, nonce
        self.lock = threading.Lock()

    def send(self, message: protocol.Message) -> None:
        data = protocol.encode_reply(message, self.nonce)
        with self.lock:
            while data:
                data = data[os.write(self.fd, data):]


class Recorder:
    """The record of each candidate call, written to the channel as it happens (a line per kernel
    launch, per computing torch op, per thread started, and a begin and an end marker per call): what
    is written cannot be taken back, and the judge, not this process, tallies it. The harness's switches
    for the call (poison byte, no-op launches) are here too, set by the harness around each call; none
    of them turns any recording off."""

    def __init__(self, channel: Channel, stack_owner) -> None:
        self.channel = channel
        self.stack_owner = stack_owner  # seal.Seal.stack_owner: who is innermost on the stack
        self.poison_byte: int | None = None  # fill of every tensor the candidate allocates, or None
        self.noop = False  # the candidate's own kernels are not launched (the judge's no-op check)
        self.device_index: int | None = None  # CUDA: the device whose current stream is checked
        self.stream: int | None = None  # the raw stream the current call began on

    def send(self, record: protocol.Record) -> None:
        self.channel.send(record)

    def begin(self, index: int) -> None:
        if self.device_index is not None and _raw_stream is not None:
            self.stream = _raw_stream(self.device_index)
        self.send(BeginRecord(call=index))


def _kernel_name(fn) -> tuple[str, bool]:
    inner = getattr(fn, "fn", fn)
    module = getattr(inner, "__module__", "?")
    return f"{module}.{getattr(inner, '__qualname__', '?')}", module == CANDIDATE_MODULE


_PLAIN_ARG_TYPES = (bool, int, float, str, type(None), torch.dtype, tl.constexpr, tl.dtype)


def _odd_arg(value) -> str | None:
    """Why a kernel argument is not a plain tensor, scalar or descriptor (an object whose data_ptr()
    or __index__ could run the candidate's Python inside Triton's launch), or None."""
    # nn.Parameter exactly (a ModelNew's weights), never a subclass of it: its methods are torch's
    if type(value) in (torch.Tensor, torch.nn.Parameter) or isinstance(value, _PLAIN_ARG_TYPES):
        return None
    if TensorDescriptor is not None and type(value) is TensorDescriptor:
        return None
    if type(value) is tuple:
        return next((why for why in map(_odd_arg, value) if why), None)
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _options(fn, kwargs: dict) -> list[str]:
    """The keywords of a launch that are neither the kernel's parameters nor launch settings."""
    params = getattr(fn, "arg_names", None)
    params = frozenset(p for p in params if isinstance(p, str)) if isinstance(params, (list, tuple)) else frozenset()
    return sorted(k for k in kwargs if k not in protocol.LAUNCH_OPTIONS and k not in params)


def _tensor_ranges(values, out: list) -> list:
    """(first byte, end) of the storage of every tensor among a launch's arguments (a descriptor's base,
    a tuple's items)."""
    for value in values:
        if type(value) in (torch.Tensor, torch.nn.Parameter):
            storage = value.untyped_storage()
            out.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
        elif TensorDescriptor is not None and type(value) is TensorDescriptor:
            _tensor_ranges([value.base], out)
        elif type(value) is tuple:
            _tensor_ranges(value, out)
    return out


def _fence_interpreter_memory() -> list | None:
    """On the CPU, Triton's interpreter makes a kernel's load, store or atomic a raw access at whatever
    address its pointer arithmetic gives: any memory of this process (the harness's objects, the
    seal's hooks), with no audit event. Each is checked first to fall inside a storage of the running
    launch's tensor arguments. Returns the list of those ranges, which the launch wrapper keeps (empty
    outside a launch: every access refused)."""
    try:
        import numpy as np
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover - no interpreter
        return None
    raw = interpreter._interpreter
    ranges: list[tuple[int, int]] = []

    def check(ptrs, mask, itemsize, _np=np, _ranges=ranges):
        p = _np.asarray(ptrs).astype(_np.uint64, copy=False)
        if mask is not None:
            p = p[_np.broadcast_to(_np.asarray(mask, dtype=bool), p.shape)]
        p = p.ravel()
        if not p.size:
            return
        ok = _np.zeros(p.shape, dtype=bool)
        for lo, hi in _ranges:
            if hi - lo >= itemsize:
                ok |= (p >= _np.uint64(lo)) & (p <= _np.uint64(hi - itemsize))
        if not ok.all():
            raise RuntimeError(f"a kernel accessed memory at {int(p[~ok][0]):#x}, outside the launch's tensor "
                               "arguments: a kernel reads and writes only the tensors it is given")

    fenced = types.SimpleNamespace(**{name: getattr(raw, name) for name in dir(raw) if not name.startswith("__")})

    def load(ptrs, mask, other, dtype, _raw=raw.load, _np=np):
        check(ptrs, mask, _np.dtype(dtype).itemsize)
        return _raw(ptrs, mask, other, dtype)

    def store(ptrs, value, mask, _raw=raw.store):
        check(ptrs, mask, value.dtype.itemsize)
        return _raw(ptrs, value, mask)

    def atomic_cas(ptr, cmp, val, sem, _raw=raw.atomic_cas):
        check(ptr, None, val.dtype.itemsize)
        return _raw(ptr, cmp, val, sem)

    def atomic_rmw(op, ptr, val, mask, sem, _raw=raw.atomic_rmw):
        check(ptr, mask, val.dtype.itemsize)
        return _raw(op, ptr, val, mask, sem)

    fenced.load, fenced.store, fenced.atomic_cas, fenced.atomic_rmw = load, store, atomic_cas, atomic_rmw
    interpreter._interpreter = fenced
    return ranges


def _wrap_run(cls, recorder: Recorder, ranges: list | None = None, check: SourceCheck | None = None) -> None:
    """Every launch is recorded with its stream, its argument types and any compile option it passes
    (refused: see LAUNCH_OPTIONS). The launch itself is not exempt from the torch-op monitor: grid
    functions and pre-run hooks are the candidate's code. No launch is made once a Triton function's
    source as Triton reads it was found not to be the checked source (SourceCheck)."""
    original = cls.run

    def run(self, *args, _rec=recorder, _name=_kernel_name, _odd=_odd_arg, _orig=original, _launch=LaunchRecord,
            _opts=_options, _ranges=ranges, _check=check, **kwargs):
        if _check is not None and (_check.mismatches or _check.check(self) or _check.drifted()):
            raise RuntimeError(f"refused to launch a kernel: {_check.mismatches[0]}")
        options = _opts(self, kwargs)
        if kwargs.get("warmup", False) and not options:
            return _orig(self, *args, **kwargs)
        name, own = _name(self)
        odd = sorted({why for why in map(_odd, list(args) + [v for k, v in kwargs.items() if k != "grid"]) if why})
        side = (_rec.device_index is not None and _raw_stream is not None
                and _raw_stream(_rec.device_index) != _rec.stream)
        _rec.send(_launch(name=name, own=own, side=side, odd=odd, options=options))
        if odd or options:  # refused: its methods would run inside Triton's argument binding; options reach the compiler
            return None
        if own and _rec.noop:
            return None
        if _ranges is None:
            return _orig(self, *args, **kwargs)
        outer = list(_ranges)
        _ranges[:] = _tensor_ranges(list(args) + list(kwargs.values()), [])
        try:
            return _orig(self, *args, **kwargs)
        finally:
            _ranges[:] = outer

    cls.run = run


def _wrap_threads(recorder: Recorder) -> None:
    original = threading.Thread.start

    def start(self, *args, _rec=recorder, _orig=original, _thread=ThreadRecord(), **kwargs):
        _rec.send(_thread)
        return _orig(self, *args, **kwargs)

    threading.Thread.start = start


def _watch_mode_pops(recorder: Recorder) -> None:
    """Every pop of torch's dispatch-mode stack is recorded. Torch pops every mode, the torch-op monitor
    with them, to run code no mode may see: printing a tensor (repr, str, an f-string) reads its values
    into Python that way, so a launcher could compute the answer in Python unrecorded. Within a call the
    harness pops the monitor once, after the call's probe; the judge counts any pop before the probe.
    The wrapped function is the module global torch's pops look up (a replacement shows as tampering:
    the module is sealed)."""
    original = _python_dispatch._pop_torch_dispatch_stack

    def pop(*args, _rec=recorder, _orig=original, _suspend=SuspendRecord()):
        _rec.send(_suspend)
        return _orig(*args)

    _python_dispatch._pop_torch_dispatch_stack = pop


# --- the code Triton compiles or interprets is the code the policy checked ------------------------------
# Triton does not compile a kernel from its function object: it reads the function's source lines again
# and cuts them by text. The JIT keeps the lines from the first decorator on and starts at the first
# line matching `^def name(`; the CPU interpreter starts at the last line whose stripped text begins with
# `def ` and execs what follows. A string whose text spans lines can hold such a line, and then the code
# Triton runs is the string's, which the policy saw only as a constant. So every Triton function of the
# candidate's is held to the text Triton takes for it: parsed, it must be the very function the policy
# checked (the same syntax tree, decorators aside, positions ignored).

def _function_dump(node: ast.FunctionDef) -> str:
    """A function's syntax tree without its decorators and positions (Triton's text has no decorators)."""
    saved = node.decorator_list
    node.decorator_list = []
    try:
        return ast.dump(node)
    finally:
        node.decorator_list = saved


class SourceCheck:
    """The candidate's functions as the static policy checked them (read from the candidate's file before
    any of its code runs), and every Triton function of the candidate's compared with them: when it is
    built, when it is launched, when the interpreter is about to exec its text, and after the import (what
    the module holds). A difference is written down in `mismatches` (the judge rejects on any) and stops
    every later launch of the candidate's kernels and any exec of that text."""

    def __init__(self, source: str, filenames: tuple[str, ...]) -> None:
        self.filenames = frozenset(filenames)
        self.functions: dict[tuple[str, int], str] = {}
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])  # co_firstlineno
                self.functions[(node.name, first)] = _function_dump(node)
        self.mismatches: list[str] = []
        self.matched: dict[int, tuple[object, str]] = {}  # id(Triton function) -> (it, the text that matched)

    def _note(self, why: str) -> str:
        if why not in self.mismatches:
            self.mismatches.append(why)
        return why

    def owned(self, fn) -> bool:
        code = getattr(fn, "__code__", None)
        return code is not None and code.co_filename in self.filenames

    def problem(self, fn, text: str | None) -> str | None:
        """Why `text`, the source Triton takes for the candidate's function `fn`, is not `fn` as checked;
        None when it is (or when `fn` is not the candidate's)."""
        if not self.owned(fn):
            return None
        code = fn.__code__
        where = f"{code.co_name} (line {code.co_firstlineno})"
        checked = self.functions.get((code.co_name, code.co_firstlineno))
        if checked is None:
            return self._note(f"{where}: no such function in the checked source")
        if text is None:
            return self._note(f"{where}: Triton has no source text for it")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return self._note(f"{where}: the text Triton reads for it does not parse")
        node = tree.body[0] if len(tree.body) == 1 else None
        if not isinstance(node, ast.FunctionDef) or _function_dump(node) != checked:
            return self._note(f"{where}: the text Triton takes for it is not that function")
        return None

    def check(self, obj) -> str | None:
        """A Triton function (JIT, interpreted, or an autotuner's or heuristics' wrapper of one): its text
        as Triton takes it, compared."""
        for _ in range(16):  # Autotuner / Heuristics hold the function they wrap in .fn
            if isinstance(obj, JITCallable) or (InterpretedFunction is not None and isinstance(obj, InterpretedFunction)):
                break
            if not isinstance(obj, KernelInterface):
                return None
            obj = getattr(obj, "fn", None)
        else:
            return None
        seen = self.matched.get(id(obj))
        if isinstance(obj, JITCallable):
            text = obj._src
            if seen is not None and seen[0] is obj and seen[1] is text:
                return None  # (every launch comes here: the text that matched, unchanged)
            why = self.problem(obj.fn, text)
        elif seen is not None and seen[0] is obj:
            return None  # the interpreter's text is read once, when it first runs, and checked then too
        else:
            text = _interpreted_text(obj.fn)
            why = self.problem(obj.fn, text)
            if why is None and self.owned(obj.fn):
                # the interpreter builds a JITFunction of it too (for line numbers), and on a GPU that cut
                # is what compiles: held to the checked source here as well, before any launch
                try:
                    why = self.problem(obj.fn, JITFunction(obj.fn)._src)
                except Exception:
                    why = self._note(f"{obj.fn.__code__.co_name}: Triton's JIT cannot read its source")
        if why is None and self.owned(obj.fn):
            self.matched[id(obj)] = (obj, text)
        return why

    def drifted(self) -> str | None:
        """Whether the text of any Triton function already matched has changed since (a helper the launched
        kernel calls is compiled from its text too, with no launch of its own to check it at)."""
        for obj, text in list(self.matched.values()):
            if isinstance(obj, JITCallable) and obj._src is not text:
                code = obj.fn.__code__
                return self._note(f"{code.co_name} (line {code.co_firstlineno}): its text changed after it was checked")
        return None

    def module(self, module) -> None:
        """After the import: every Triton function the module holds, in its names, its classes and its
        containers."""
        seen: set[int] = set()

        def visit(value, depth: int) -> None:
            if id(value) in seen or depth > 4:
                return
            seen.add(id(value))
            kind = type(value)
            if issubclass(kind, KernelInterface) or issubclass(kind, JITCallable):
                self.check(value)
            elif issubclass(kind, dict):
                for v in list(dict.values(value)):
                    visit(v, depth + 1)
            elif issubclass(kind, type):
                if vars(value).get("__module__") == CANDIDATE_MODULE:
                    for v in list(vars(value).values()):
                        visit(v, depth + 1)
            else:
                for base in (list, tuple, set, frozenset):
                    if issubclass(kind, base):
                        for v in list(base.__iter__(value)):
                            visit(v, depth + 1)
                        break

        for value in list(vars(module).values()):
            visit(value, 0)


def _interpreted_text(fn) -> str | None:
    """The text Triton's interpreter will exec for `fn` (FunctionRewriter.rewrite_ast, up to the parse):
    its source lines cut at its own def-finding; None when it has no source (it then runs `fn` itself)."""
    try:
        lines, _ = inspect.getsourcelines(fn)
    except Exception:
        return None
    rewriter = FunctionRewriter(fn)
    rewriter.def_lineno = rewriter._find_def(lines)
    return _ORIGINAL_PREPARE_SOURCE(rewriter, lines)


_ORIGINAL_PREPARE_SOURCE = FunctionRewriter._prepare_source if FunctionRewriter is not None else None


def _hold_sources(check: SourceCheck) -> None:
    """Compare every Triton function as it is built (JITCallable, InterpretedFunction) and every text the
    interpreter is about to exec; before the seal, whose integrity check then covers these methods."""
    original_init = JITCallable.__init__

    def jit_init(self, fn, *args, _orig=original_init, _check=check, **kwargs):
        _orig(self, fn, *args, **kwargs)
        _check.check(self)

    JITCallable.__init__ = jit_init
    if InterpretedFunction is None:
        return
    original_interpreted = InterpretedFunction.__init__

    def interpreted_init(self, fn, *args, _orig=original_interpreted, _check=check, **kwargs):
        _orig(self, fn, *args, **kwargs)
        _check.check(self)

    InterpretedFunction.__init__ = interpreted_init

    def prepare_source(self, lines, _orig=_ORIGINAL_PREPARE_SOURCE, _check=check):
        text = _orig(self, lines)
        why = _check.problem(self.fn, text)
        if why is not None:
            raise RuntimeError(f"refused to interpret {why}")
        return text

    FunctionRewriter._prepare_source = prepare_source
    original_exec = FunctionRewriter._compile_and_exec
    interpreter_globals = vars(sys.modules[FunctionRewriter.__module__])

    def compile_and_exec(self, transformed_ast, _orig=original_exec, _check=check, _names=interpreter_globals):
        """Triton's own copies its module's globals (numpy among them) into the kernel's module, where the
        candidate's other code could read them: a candidate's rewritten kernel gets a namespace of its
        own instead (the module's names over the interpreter's), and the module stays as it was."""
        if not _check.owned(self.fn):
            return _orig(self, transformed_ast)
        code = compile(transformed_ast, filename=self.filename, mode="exec")
        namespace, local = {**_names, **self.fn.__globals__}, {**self.kwargs}
        exec(code, namespace, local)
        return local[self.fn.__name__]

    FunctionRewriter._compile_and_exec = compile_and_exec


# Triton's benchmarking of autotuning configurations: its own torch use (cache flushes, statistics)
# is not the candidate's; (file suffix, function) of the frames that make it. Only an op such a frame
# makes itself counts (seal.stack_owner): the launch it times, and everything that runs in it, is the
# candidate's.
TRITON_BENCH = (("triton/testing.py", "do_bench"), ("triton/testing.py", "do_bench_cudagraph"),
                ("triton/testing.py", "_summarize_statistics"), ("triton/runtime/autotuner.py", "_bench"),
                ("driver.py", "get_empty_cache_for_benchmark"), ("driver.py", "clear_cache"))


def make_monitor(recorder: Recorder, probe: torch.Tensor):
    """The torch-op monitor's class. A computing op is recorded unless Triton's benchmarking, not the
    candidate, is innermost on the stack (decided from the frames' code files, not from a switch). The
    harness's probe op (on `probe`, which only it holds) ends each call: the judge requires that end
    marker, so a monitor removed or bypassed for good shows as a record that stopped."""
    data_ops, alloc_ops = DATA_MOVEMENT_OPS, ALLOCATION_OPS
    owner = recorder.stack_owner
    getframe = sys._getframe
    probe_record, op_record = ProbeRecord(), OpRecord

    class TorchOpMonitor(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if args and args[0] is probe:
                recorder.send(probe_record)
                return func(*args, **(kwargs or {}))
            compute = name not in data_ops
            poison = recorder.poison_byte if name in alloc_ops else None
            who = owner(getframe(1), TRITON_BENCH) if compute or poison is not None else None
            if compute and who != "triton-bench":
                recorder.send(op_record(name=f"aten.{name}"))
            out = func(*args, **(kwargs or {}))
            if poison is not None and who not in ("triton", "triton-bench") and type(out) is torch.Tensor and out.numel():
                out.untyped_storage().fill_(poison)  # uninitialised memory is the poison
            return out

    return TorchOpMonitor


def _mode_problems(monitor) -> list[str]:
    """What a call left behind that would let later harness steps run candidate code or hide ops: a
    torch function or dispatch mode of its own, torch functions disabled, the Python dispatch key
    excluded."""
    problems = []
    if torch._C._len_torch_function_stack() != 0:
        problems.append("a torch function mode is still active")
    if torch._C._len_torch_dispatch_stack() != 1 or torch._C._get_dispatch_stack_at(0) is not monitor:
        problems.append("the torch dispatch mode stack was changed")
    if not torch._C._is_torch_function_enabled():
        problems.append("torch functions are disabled")
    if torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.Python):
        problems.append("the Python dispatch key is excluded")
    return problems


class Around:
    """One candidate call under the monitor: a begin marker, the monitor pushed; on the way out the
    state check and the probe op, whose end marker closes the call in the record."""

    def __init__(self, recorder: Recorder, monitor_cls, probe: torch.Tensor, index: int) -> None:
        self.recorder, self.probe, self.index = recorder, probe, index
        self.mode = monitor_cls()

    def __enter__(self):
        self.recorder.begin(self.index)
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        problems = _mode_problems(self.mode)
        if not problems:  # (a mode of the candidate's would run its code on the probe)
            self.probe.neg()  # through the monitor, if it is still there: its "probe" line
        try:
            return self.mode.__exit__(*exc)
        finally:
            self.recorder.send(EndRecord(call=self.index, problems=problems))


def _digest(value, depth: int = 0) -> str:
    """A cheap fingerprint of module-level state, deep enough to see a cache being filled. Kinds are told
    by type(value), and builtin containers read through their base type's own methods, so that no
    method of the candidate's (a __class__, __repr__, __iter__ or __len__ of its own) runs here."""
    kind = type(value)
    if depth > 4:
        return kind.__name__
    if issubclass(kind, (KernelInterface, JITFunction, types.ModuleType)):
        return kind.__name__  # Triton's own caches change as it compiles; not the candidate's
    if issubclass(kind, torch.Tensor):
        return f"T({value.data_ptr()},{tuple(value.shape)},{value.dtype})"  # a reused workspace is no change
    for base in _SCALARS:
        if issubclass(kind, base):
            shown = base.__getitem__(value, slice(0, 200)) if base in (str, bytes) else value
            return base.__repr__(shown)[:200] + (f"#{base.__len__(value)}" if base in (str, bytes) else "")
    if issubclass(kind, dict):
        items = list(itertools.islice(dict.items(value), 256))
        return "{" + ",".join(f"{_digest(k, depth + 1)}:{_digest(v, depth + 1)}" for k, v in items) + f"}}#{dict.__len__(value)}"
    for base in (list, tuple, collections.deque, array.array, set, frozenset):
        if issubclass(kind, base):
            parts = [_digest(v, depth + 1) for v in itertools.islice(base.__iter__(value), 256)]
            if base in (set, frozenset):
                parts.sort()
            return f"{base.__name__}[" + ",".join(parts) + f"]#{base.__len__(value)}"
    if issubclass(kind, (bytearray, memoryview)):
        view = memoryview(value).cast("B")
        return f"{kind.__name__}({view.nbytes},{hash(bytes(view[:4096]))})"
    if issubclass(kind, functools._lru_cache_wrapper):
        return f"lru_cache({value.cache_info().currsize})"
    if issubclass(kind, functools.partial):
        return f"partial({_digest(value.args, depth + 1)},{_digest(value.keywords, depth + 1)})"
    if issubclass(kind, types.FunctionType):
        cells = [c.cell_contents for c in (value.__closure__ or ()) if _cell_filled(c)]
        return (f"fn({_digest(value.__defaults__, depth + 1)},{_digest(value.__kwdefaults__, depth + 1)},"
                f"{_digest(cells, depth + 1)},{_digest(vars(value), depth + 1)})")
    if issubclass(kind, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        frame = getattr(value, "gi_frame", None) or getattr(value, "cr_frame", None) or getattr(value, "ag_frame", None)
        return f"{kind.__name__}({_digest(dict(frame.f_locals), depth + 1) if frame is not None else 'done'})"
    if kind.__module__ == CANDIDATE_MODULE or (issubclass(kind, type) and value.__module__ == CANDIDATE_MODULE):
        try:
            return f"{kind.__name__}({_digest(dict(vars(value)), depth + 1)})"
        except TypeError:
            pass
    if kind.__module__ in _STATE_BY_PICKLE:
        try:  # iterators of the standard library keep their position out of sight but in their pickled state
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                reduced = value.__reduce_ex__(2)
            return f"{kind.__name__}({_digest(reduced, depth + 1)})"
        except Exception:
            pass
    return f"{kind.__name__}@{id(value)}"


_SCALARS = (bool, int, float, complex, str, bytes, type(None))
# modules whose types hold state a cache could live in outside __dict__ (an itertools.cycle over answers,
# a list iterator's position), which their pickled form shows
_STATE_BY_PICKLE = frozenset({"builtins", "itertools", "collections", "_collections", "functools", "operator"})


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def module_state(module) -> dict[str, str]:
    if module is None:
        return {}
    return {name: _digest(value) for name, value in list(vars(module).items())
            if not (name.startswith("__") and name.endswith("__"))}


class _PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@triton.jit
def _warm_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def _warm_up(device: str) -> None:
    """Compile and launch one kernel of ours, and enter a dispatch mode, first, so that Triton's and
    torch's lazily imported modules are in sys.modules (and have made their changes to torch) before
    the snapshots the candidate's imports and the harness's integrity are compared with."""
    x = torch.zeros(16, device=device)
    _warm_kernel[(1,)](x, 16, BLOCK=16)
    with _PassThrough():  # a mode's first use imports torch._dynamo, which rebinds torch.manual_seed
        x.neg()
    if device == "cuda":
        torch.cuda.synchronize()


class CandidateServer:
    """Serves the judge's commands (call, time, save_timed, arm, fire, forget) with the loaded candidate,
    one JSON line per command on stdin; replies and the calls' record go back on the channel."""

    def __init__(self, fn, device: str, channel: Channel, recorder: Recorder, module=None,
                 base_threads: set[str] | None = None, integrity=None, source_check: SourceCheck | None = None) -> None:
        self.fn = fn
        self.base_threads = base_threads or set()  # Python threads alive before the candidate was imported
        self.device = device
        self.channel = channel
        self.recorder = recorder
        self.probe = torch.zeros(1)
        self.monitor = make_monitor(recorder, self.probe)
        self.integrity = integrity  # seal.Integrity: the harness's modules and classes as sealed, or None
        self.source_check = source_check  # Triton functions whose source as Triton reads it was not the checked one
        self.module = module
        self.inputs: dict[tuple, dict] = {}
        self.keep: list[torch.Tensor] = []  # recent outputs stay alive so their memory is not reused
        self.timed: dict[int, torch.Tensor] = {}  # outputs of the last timing run (and clocked calls), until saved
        self.armed: tuple | None = None  # a clocked call's inputs, made before the judge's clock starts
        self.state_base: dict[str, str] | None = None  # module state after a shape's first call
        # a file problem's run-time half (kernels/problems/kernelbench_runtime.py), whose inputs the timed calls use
        self.reference = getattr(fn, "reference", None)

    def around(self, index: int) -> Around:
        return Around(self.recorder, self.monitor, self.probe, index)

    def tampered(self) -> list[str]:
        return self.integrity.changes() if self.integrity is not None else []

    def unchecked_source(self) -> list[str]:
        return list(self.source_check.mismatches) if self.source_check is not None else []

    def _prepare(self, shape: dict | None, dtype: str | None) -> None:
        """A file problem's ModelNew is built for the shape before the call, outside the torch-op
        monitor: its constructor may draw parameters with torch, its forward may not compute."""
        if shape is not None and hasattr(self.fn, "prepare"):
            self.fn.prepare(shape, getattr(torch, dtype))

    def _problem_reference(self, problem: str):
        return self.reference or importlib.import_module(f"kernels.problems.{problem}.reference")

    def inputs_of(self, cmd: protocol.CallRequest) -> dict:
        """The call's inputs, made here from the seed it names (on the device, by the problem's own
        make_inputs, as the judge's reference's were: no input crosses a process boundary or a disk),
        outside the call; the same seed again (the no-op and the second-fill calls) gets the same tensors."""
        key = (json.dumps(cmd.problem_shape, sort_keys=True), cmd.seed, cmd.input_dtype)
        if cmd.widen or key not in self.inputs:
            self.inputs.clear()  # one seed's inputs at a time: the file problems' own sizes are large
            reference = self._problem_reference(cmd.problem)
            inputs = reference.make_inputs(cmd.problem_shape, cmd.seed, self.device, getattr(torch, cmd.input_dtype))
            if cmd.widen:  # a file problem's inputs widened (FileReference.widen), for one call: not kept
                if self.reference is not None:
                    self.reference.widen(inputs, cmd.seed)
                return inputs
            self.inputs[key] = inputs
        return self.inputs[key]

    def poison(self, nbytes: int, byte: int) -> None:
        """Fill the allocator's free memory with the poison byte: whatever the candidate gets without
        writing it (a stale block, a partial write) reads as poison (0xFF is NaN in every float type)."""
        blocks = []
        # on a GPU shared with the judge and a file problem's process, past the first block (the one an
        # output of this size reuses) none beyond what the device has free, less room for the call
        # itself: at a file's own sizes an output is GiBs
        free = torch.cuda.mem_get_info()[0] - 2 * nbytes - 2**30 if self.device == "cuda" else math.inf
        for k, size in enumerate((nbytes, nbytes, 2 * nbytes, 64 * 2**20)):
            if k and size > free:
                continue
            free -= size if k else 0
            t = torch.empty(max(size, 4), dtype=torch.uint8, device=self.device)
            t.fill_(byte)
            blocks.append(t)
        del blocks

    def _state_changes(self) -> list[str]:
        """Module-level names whose state changed since this shape's first call: a cache of inputs,
        pointers or outputs that persists across calls."""
        now = module_state(self.module)
        if self.state_base is None:
            self.state_base = now
            return []
        changed = sorted(k for k in set(now) | set(self.state_base) if now.get(k) != self.state_base.get(k))
        self.state_base = now
        return changed

    def _threads(self) -> list[str]:
        return sorted(t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive())

    def call(self, cmd: protocol.CallRequest) -> CalledReply:
        self._prepare(cmd.problem_shape, cmd.input_dtype)
        inputs = self.inputs_of(cmd)
        expected_shape = tuple(cmd.shape)
        expected_dtype = getattr(torch, cmd.dtype)
        tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
        originals = [t.clone() for t in tensors]
        out_bytes = expected_dtype.itemsize * int(torch.tensor(expected_shape).prod().item())
        fill = cmd.fill
        self.poison(out_bytes, fill)
        if self.device == "cuda":
            torch.cuda.synchronize()
        threads_before = self.base_threads
        modules_before = set(sys.modules)
        self.recorder.poison_byte, self.recorder.noop = fill, cmd.noop
        t0 = time.perf_counter()
        try:
            with self.around(cmd.index):
                out = self.fn(**inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        finally:
            self.recorder.poison_byte, self.recorder.noop = None, False
        seconds = time.perf_counter() - t0
        problem = _output_problem(out, tensors, expected_shape, expected_dtype, self.device)
        if problem is None and any(out.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() for k in self.keep):
            problem = "returned the memory of an earlier call's output; return a new tensor every call"
        facts = CalledReply(
            seconds=seconds,
            new_modules=sorted(set(sys.modules) - modules_before),
            inputs_mutated=[i for i, (t, o) in enumerate(zip(tensors, originals)) if not torch.equal(t, o)],
            output_problem=problem,
            threads_alive=sorted(set(self._threads()) - threads_before),
            state_changed=[] if cmd.noop else self._state_changes(),
            tampered=self.tampered(),
            unchecked_source=self.unchecked_source(),
        )
        if problem is None:
            # (the last four outputs, or as many as fit KEPT_BYTES, at least the last)
            self.keep = (self.keep + [out])[-max(1, min(4, KEPT_BYTES // max(out_bytes, 1))):]
            tensor_file.write(out, cmd.output)
        return facts

    def time(self, cmd: protocol.TimeRequest) -> TimedReply:
        """Timed calls on fresh inputs: `slots` sets of buffers at addresses no check call saw, each
        refilled with new values (a fresh seed) before every call, outside the clock. Every output
        is kept, as it was when its call returned (a copy, taken outside the clock: what a later call
        writes into an earlier call's tensor is not that call's answer), so that the judge can
        re-check the ones it picks afterwards; past `keep_bytes` (the
        file problems' own sizes on a GPU) a uniform random sample of them (reservoir sampling, each
        call's draw made after it returned, from the system's entropy: a call cannot know whether it
        will be kept), and the reply says which."""
        reference = self._problem_reference(cmd.problem)
        self._prepare(cmd.shape, cmd.dtype)
        shape, dtype = cmd.shape, getattr(torch, cmd.dtype)
        seed0, n_slots = cmd.seed_base, cmd.slots
        # the output's own dtype: the inputs' for a floating output, its own for an integer or boolean one
        expected_shape, out_dtype = reference.output_spec(shape, dtype)
        expected_shape = tuple(expected_shape)
        slots = [reference.make_inputs(shape, seed0 + j, self.device, dtype) for j in range(n_slots)]
        self.timed.clear()
        self.keep.clear()
        seeds: dict[int, int] = {}
        kept_ptrs: dict[int, int] = {}  # storage pointer -> the call whose kept output holds it
        returned: dict[int, torch.Tensor] = {}  # the kept calls' own tensors: their memory stays theirs
        facts = {"threads_alive": [], "output_problem": None}
        keep_bytes = cmd.keep_bytes
        out_bytes = math.prod(expected_shape) * out_dtype.itemsize
        room = None if keep_bytes is None else max(2, int(keep_bytes) // max(2 * out_bytes, 1))  # copy and tensor
        seen = [0]

        def keep(i: int) -> bool:
            """Whether call i's output joins the kept ones (evicting one at random when they are full)."""
            seen[0] += 1
            if room is None or len(self.timed) < room:
                return True
            if secrets.randbelow(seen[0]) >= room:
                return False
            victim = list(self.timed)[secrets.randbelow(len(self.timed))]
            del self.timed[victim]
            returned.pop(victim, None)
            for ptr, j in list(kept_ptrs.items()):
                if j == victim:  # its memory may come back to a later output: no longer "an earlier output's"
                    del kept_ptrs[ptr]
            return True
        threads_before = self.base_threads
        modules_before = set(sys.modules)

        def prepare(i: int, slot: int | None = None) -> dict:
            buffers = slots[i % n_slots if slot is None else slot]
            seed = seed0 + n_slots + i
            for name, value in reference.make_inputs(shape, seed, self.device, dtype).items():
                if isinstance(value, torch.Tensor):
                    buffers[name].copy_(value)
            seeds[i] = seed
            return buffers

        def record(i: int, out, copy: bool = False) -> None:
            """After call i, outside the clock. copy: a CUDA-graph replay, whose output buffer the
            next replay overwrites and which runs none of the candidate's Python."""
            alive = sorted(set(self._threads()) - threads_before)
            if alive and not facts["threads_alive"]:
                facts["threads_alive"] = alive
            problem = _output_problem(out, [], expected_shape, out_dtype, self.device)
            if problem is None and not copy:
                ptr = out.untyped_storage().data_ptr()
                if ptr in kept_ptrs:
                    problem = "returned the memory of an earlier timed call's output; return a new tensor every call"
            if problem and facts["output_problem"] is None:
                facts["output_problem"] = f"{problem} (timed call {i})"
            if problem is None and keep(i):
                if not copy:
                    kept_ptrs[out.untyped_storage().data_ptr()] = i
                    returned[i] = out
                self.timed[i] = out.detach().clone()

        result = timing.time_fn(self.fn, [], self.device, cmd.reps, cmd.warmup,
                                prepare=prepare, record=record, around=self.around,
                                sync_reps=cmd.sync_reps, graph=cmd.graph, graph_slots=n_slots)
        facts["state_changed"] = self._state_changes()
        facts["new_modules"] = sorted(set(sys.modules) - modules_before)
        facts["tampered"] = self.tampered()
        facts["unchecked_source"] = self.unchecked_source()
        return TimedReply(**result, seeds={str(i): seed for i, seed in seeds.items()}, facts=CallFacts(**facts),
                          kept=sorted(self.timed))

    def arm(self, cmd: protocol.ArmRequest) -> ArmedReply:
        """A batch of clocked calls, made ready before the judge's clock starts (it times the `fire` that
        follows): an input set per seed of `capture_seeds`; on CUDA one CUDA graph holding the whole
        batch (the perturbation of its inputs, the calls, after a warm-up call each as torch.cuda.graphs
        asks, and the digest of their outputs), its factors and positions read from a small tensor the
        fire fills, so that the fire replays it with no Python of the candidate's or ours on the clock;
        then every set refilled with the values of its seed in `seeds`."""
        reference = self._problem_reference(cmd.problem)
        self._prepare(cmd.shape, cmd.dtype)
        shape, dtype = cmd.shape, getattr(torch, cmd.dtype)
        sets = [reference.make_inputs(shape, seed, self.device, dtype) for seed in cmd.capture_seeds]
        expected_shape, out_dtype = reference.output_spec(shape, dtype)
        expected_shape = tuple(expected_shape)
        index = cmd.index
        digest = timing.ClockDigest(timing.digest_weights(timing.DIGEST_ELEMENTS, cmd.a, cmd.b, self.device))
        params = torch.zeros(4, dtype=torch.int64, device=self.device)  # the fire's (pa, pb, da, db)
        graph, outs, value, graph_error = None, None, None, None
        if self.device == "cuda" and cmd.graph:
            try:
                graph, outs, value = self._capture(sets, index, params, digest, expected_shape, out_dtype)
            except Exception as exc:  # not every callable is capturable: the batch runs eagerly
                graph_error = f"{type(exc).__name__}: {exc}"[:300]
                graph, outs, value = None, None, None
                torch.cuda.synchronize()
        for inputs, seed in zip(sets, cmd.seeds):
            for name, v in reference.make_inputs(shape, seed, self.device, dtype).items():
                if isinstance(v, torch.Tensor):
                    inputs[name].copy_(v)
        self.armed = (sets, expected_shape, out_dtype, index, graph, outs, value, digest, params)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return ArmedReply(graph=graph is not None, graph_error=graph_error)

    def _capture(self, sets: list[dict], index: int, params: torch.Tensor, digest, expected_shape, dtype):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for k, inputs in enumerate(sets):
                with self.around(index + k):
                    self.fn(**inputs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph, outs = torch.cuda.CUDAGraph(), []
        with torch.cuda.graph(graph):
            timing.perturb_sets(sets, params[0], params[1])
            for k, inputs in enumerate(sets):
                with self.around(index + len(sets) + k):
                    outs.append(self.fn(**inputs))
            if any(type(out) is not torch.Tensor or tuple(out.shape) != expected_shape or out.dtype != dtype
                   for out in outs):  # the eager batch says what is wrong with them
                raise ValueError("an output of the captured calls is not a tensor of the expected shape and dtype")
            value = digest.compute(outs, params[2], params[3])
        torch.cuda.synchronize()
        return graph, outs, value

    def fire(self, cmd: protocol.FireRequest) -> FiredReply:
        """On the judge's clock: every armed input set perturbed by the factors the command brings, the
        calls made back to back, and one digest of the outputs at positions the command draws (the graph
        replayed, or all of it eagerly): the reply that stops the clock carries the digest. The outputs
        are kept for save_timed, and checked in full there."""
        sets, expected_shape, dtype, index, graph, outs, value, digest, params = self.armed
        self.armed = None
        m = timing.DIGEST_MODULUS
        params.copy_(torch.tensor([cmd.pa % m, cmd.pb, cmd.da % m, cmd.db], dtype=torch.int64))
        if graph is not None:
            graph.replay()
        else:
            timing.perturb_sets(sets, params[0], params[1])
            outs = []
            for k, inputs in enumerate(sets):
                with self.around(index + k):
                    outs.append(self.fn(**inputs))
            for out in outs:
                if type(out) is not torch.Tensor or tuple(out.shape) != expected_shape or out.dtype != dtype:
                    return FiredReply(digest=None,
                                      output_problem=_output_problem(out, [], expected_shape, dtype, self.device))
            value = digest.compute(outs, params[2], params[3])
        for k, out in enumerate(outs):
            self.timed[index + k] = out
        return FiredReply(digest=float(value.item()), output_problem=None)

    def ping(self, cmd: protocol.PingRequest) -> PongReply:
        return PongReply()

    def save_timed(self, cmd: protocol.SaveTimedRequest) -> SavedReply:
        """The kept outputs the judge picked, as files (each let go once saved); `clear` (the last batch
        of a pick): the rest are let go too."""
        saved = {}
        for i in cmd.indices:
            out = self.timed.pop(i, None)
            if out is not None:
                path = os.path.join(cmd.dir, f"timed_{i}.pt")
                tensor_file.write(out, path)
                saved[str(i)] = path
            del out
        if cmd.clear:
            self.timed.clear()
        return SavedReply(files=saved, tampered=self.tampered())

    def serve(self, stream) -> None:
        """The judge's requests, a line each (a line that is not one of the protocol's ends the process:
        the judge sent it, and reads the death)."""
        handlers = {"call": self.call, "time": self.time, "save_timed": self.save_timed, "arm": self.arm,
                    "fire": self.fire, "ping": self.ping}
        for line in stream:
            cmd = protocol.read_request(line, protocol.CandidateRequests)
            if cmd.op == "exit":
                return
            if cmd.op == "forget":
                self.inputs.clear()
                self.keep.clear()
                self.timed.clear()
                self.state_base = None
                if self.device == "cuda":
                    torch.cuda.empty_cache()
                self.channel.send(ForgotReply())
                continue
            try:
                reply = handlers[cmd.op](cmd)
                if self.device == "cuda" and cmd.op not in ("fire", "ping"):
                    # what the command freed goes back to the device, not to this process's cache: the
                    # judge and a file problem's process share the GPU with it (a file's own sizes are
                    # tens of GiB). Not after a fire, whose reply stops the judge's clock.
                    torch.cuda.empty_cache()
                self.channel.send(reply)
            except Exception as exc:
                text = traceback.format_exc(limit=8)
                fatal = "CUDA" in text or "cuda" in type(exc).__name__.lower()
                self.channel.send(ErrorReply(error=text[-6000:], compile=_is_compile_error(exc), fatal=fatal))
                if fatal:  # a CUDA fault poisons the context: nothing more can run here
                    return


def _is_compile_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct",
                         "OutOfResources", "PTXASError"})


def _output_problem(out, inputs, shape, dtype, device) -> str | None:
    if type(out) is not torch.Tensor:
        return f"returned {type(out).__module__}.{type(out).__qualname__}; expected a plain torch.Tensor"
    if tuple(out.shape) != shape:
        return f"returned shape {tuple(out.shape)}; expected {shape}"
    if out.dtype != dtype:
        return f"returned dtype {out.dtype}; expected {dtype}"
    if out.device.type != device or (device == "cuda" and out.device.index != torch.cuda.current_device()):
        return f"returned a tensor on {out.device}; expected {device}"
    own = out.untyped_storage().data_ptr()
    if any(t.untyped_storage().data_ptr() == own for t in inputs):
        return "the output shares memory with an input; return a new tensor"
    return None


def _file_problem_entry(cls, args: protocol.CandidateAssignment, source: str):
    """The candidate's ModelNew, wrapped to be built per shape with Model's parameters (`source`: the
    problem file's text)."""
    from kernels.problems.kernelbench_runtime import CandidateModel, FileReference
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise TypeError(f"{args.entry} must be a torch.nn.Module subclass")
    reference = FileReference(args.problem_name, source)
    reference.param_seed = args.param_seed
    return CandidateModel(cls, reference, args.device)


def _paths(joined: str) -> list[str]:
    return [p for p in joined.split(os.pathsep) if p]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reply-fd", type=int, required=True)
    args = ap.parse_args(argv)
    reply_fd = args.reply_fd
    # before any code of the candidate's: what it starts cannot read this process's memory (the
    # nonce, the channel) through /proc
    dumpable_off = confinement.make_non_dumpable()
    # The process may be started ahead of need (the judge starts it while it prepares inputs and
    # references, or before it has a request at all): torch and Triton are imported by now, and it
    # knows nothing of its evaluation until this line, the judge's assignment. It carries this run's
    # nonce, which every reply carries back, so a line the candidate writes into the channel (were it
    # ever to reach the descriptor) is told apart from ours. No line (the judge closed the pipe
    # unassigned): nothing to do.
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    try:
        args = protocol.read_request(line, protocol.CandidateAssignment)
    except protocol.ValidationError as exc:
        print(f"candidate_process: a bad assignment: {protocol.first_error(exc)}", file=sys.stderr)
        return 2
    nonce = args.nonce
    if args.fsize:  # the largest output this evaluation saves, and a log: a disk filler dies of SIGXFSZ
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize, args.fsize))

    channel = Channel(reply_fd, nonce)
    reply = channel.send
    recorder = Recorder(channel, stack_owner=None)

    # the candidate's source as the judge wrote it (the text the static policy checked), read before any
    # of its code runs: what Triton reads of its kernels is held to it (SourceCheck)
    with open(args.candidate, encoding="utf-8") as f:
        source_check = SourceCheck(f.read(), (args.candidate, os.path.realpath(args.candidate)))
    _warm_up(args.device)
    _hold_sources(source_check)
    _wrap_run(JITFunction, recorder, check=source_check)
    if InterpretedFunction is not None:
        _wrap_run(InterpretedFunction, recorder, _fence_interpreter_memory() if args.device == "cpu" else None,
                  check=source_check)
    _wrap_threads(recorder)
    _watch_mode_pops(recorder)
    fences = {}
    if args.device == "cuda":
        recorder.device_index = torch.cuda.current_device()
        if args.gpu_memory_fraction > 0:  # a GPU memory bomb ends here, leaving the judge its share
            torch.cuda.set_per_process_memory_fraction(args.gpu_memory_fraction)
            fences["gpu_memory_fraction"] = args.gpu_memory_fraction
    # The fences go up now, with CUDA and Triton started and before any code of the candidate's
    # (kernels/evaluator/fences.py: what may be read, written and started, and why in this order).
    fences.update(sandbox_fences.put_up(
        args.device, writable=_paths(args.writable), readable=_paths(args.readable), toolchain=args.toolchain,
        netns=args.netns, landlock=args.landlock, landlock_reads=args.landlock_reads,
        landlock_exec=args.landlock_exec, seccomp=args.seccomp, drop_capabilities=args.drop_capabilities))
    fences["non_dumpable"] = dumpable_off
    reply(FencedReply(fences=fences))
    problem_source = None
    if args.problem_file:  # imported before the seal: the harness's half of a file problem, and the modules
        from kernels.problems import kernelbench_runtime  # the file imports (preload_imports says why)
        with open(args.problem_file) as f:
            problem_source = f.read()
        kernelbench_runtime.preload_imports(problem_source, tuple(p for ps in seal.code_roots().values() for p in ps))
    modules_before = set(sys.modules)
    base_threads = {t.name for t in threading.enumerate() if t is not threading.main_thread()}
    # The seal, last before any code of the candidate's or the problem's runs: the audit hook, and the
    # harness's modules and classes as they are now (kernels/evaluator/seal.py).
    integrity = seal.Integrity(seal.harness_objects(sys.modules[__name__]))
    sealed = seal.install(candidate_file=os.path.realpath(args.candidate), scratch=os.path.dirname(args.candidate),
                          workdir=os.getcwd(), triton_cache=os.environ.get("TRITON_CACHE_DIR", ""),
                          channel_fd=reply_fd, nonce=nonce, mode=args.seal)
    recorder.stack_owner = sealed.stack_owner
    t0 = time.perf_counter()
    try:
        spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, args.candidate)
        module = importlib.util.module_from_spec(spec)
        module.__builtins__ = seal.candidate_builtins(sealed.check_import)
        sys.modules[CANDIDATE_MODULE] = module
        spec.loader.exec_module(module)
    except BaseException:
        reply(ErrorReply(compile=True, fatal=True, error=traceback.format_exc(limit=8)[-6000:]))
        return 0
    fn = vars(module).get(args.entry)
    if not callable(fn):
        reply(ErrorReply(compile=True, fatal=True, error=f"the module defines no callable {args.entry}"))
        return 0
    if not args.problem_file and type(fn) is not types.FunctionType:  # an object whose methods the harness would call
        reply(ErrorReply(compile=True, fatal=True,
                         error=f"{args.entry} must be a plain function (def {args.entry}(...)), not {type(fn).__name__}"))
        return 0
    new_modules = sorted(set(sys.modules) - modules_before - {CANDIDATE_MODULE})
    source_check.module(module)  # what the module holds, besides what was checked as it was built
    if args.problem_file:  # the problem's own imports are not the candidate's
        try:
            fn = _file_problem_entry(fn, args, problem_source)
        except BaseException:
            reply(ErrorReply(compile=True, fatal=True, error=traceback.format_exc(limit=8)[-6000:]))
            return 0
    reply(CandidateReadyReply(import_s=time.perf_counter() - t0, new_modules=new_modules,
                              banned_modules=[m for m in new_modules if policy.module_violation(m)], fences=fences,
                              threads=len(threading.enumerate()), unchecked_source=list(source_check.mismatches)))
    CandidateServer(fn, args.device, channel, recorder, module, base_threads, integrity,
                    source_check).serve(sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
