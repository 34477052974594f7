"""The candidate's process. The judge starts it in a scratch directory, in its own process group,
with a clean environment and resource limits; it is the only place candidate code ever runs.

It reports facts (which kernels launched, which torch ops ran, whether the output is a plain new
tensor, whether inputs changed) as JSON lines on a dedicated pipe; it decides nothing. Inputs come
from files the judge wrote; outputs go back as files; the reference never enters this process."""
from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import os
import resource
import sys
import threading
import time
import traceback
import types
from collections import Counter

import torch
import triton
import triton.language as tl
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction, KernelInterface

from kernels.evaluator import confinement, policy, timing
from kernels.evaluator import fences as sandbox_fences

CANDIDATE_MODULE = "candidate"
# aten ops that only allocate, move, view or cast data: everything else is computation, which must
# happen in the candidate's own Triton kernels.
DATA_MOVEMENT_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "full", "full_like", "new_full", "ones", "ones_like",
    "new_ones", "fill_", "zero_", "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided",
    "permute", "transpose", "t", "expand", "unsqueeze", "squeeze", "select", "slice", "split",
    "split_with_sizes", "chunk", "unbind", "narrow", "contiguous", "clone", "copy_", "_to_copy",
    "to", "detach", "alias", "lift_fresh", "lift_fresh_copy", "view_as", "flatten", "unflatten",
    "_local_scalar_dense", "arange", "record_stream", "sym_size", "sym_stride", "sym_numel",
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
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - older Triton
    InterpretedFunction = None


class Watch:
    """Kernel launches, torch ops, streams, kernel arguments and threads during one candidate call."""

    def __init__(self) -> None:
        self.launched: list[str] = []
        self.torch_ops: Counter[str] = Counter()
        self.paused = 0  # > 0 while Triton's autotuner benchmarks: its torch use is Triton's own
        self.in_launch = 0  # > 0 inside a Triton launch: its host buffers are not poisoned
        self.disable_candidate_kernels = False
        self.poison_byte: int | None = None  # fill of every tensor the candidate allocates, or None
        self.device_index: int | None = None  # CUDA: the device whose current stream is checked
        self.stream: int | None = None  # the raw stream the call began on
        self.side_streams: list[str] = []
        self.odd_args: list[str] = []
        self.threads_started = 0

    def reset(self) -> None:
        self.launched.clear()
        self.torch_ops.clear()
        self.side_streams.clear()
        self.odd_args.clear()
        self.threads_started = 0
        if self.device_index is not None and _raw_stream is not None:
            self.stream = _raw_stream(self.device_index)


WATCH = Watch()


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


def _wrap_run(cls) -> None:
    """Every launch is recorded with its stream and its argument types. The launch itself is not
    exempt from the torch-op monitor: grid functions and pre-run hooks are the candidate's code."""
    original = cls.run

    def run(self, *args, **kwargs):
        if not kwargs.get("warmup", False):
            name, own = _kernel_name(self)
            WATCH.launched.append(name)
            odd = [why for why in map(_odd_arg, list(args) + [v for k, v in kwargs.items() if k != "grid"]) if why]
            if odd:  # refused: its methods would run inside Triton's argument binding
                WATCH.odd_args.append(f"{name} got {', '.join(sorted(set(odd)))}")
                return None
            if WATCH.device_index is not None and _raw_stream is not None \
                    and _raw_stream(WATCH.device_index) != WATCH.stream:
                WATCH.side_streams.append(name)
            if own and WATCH.disable_candidate_kernels:
                return None
        WATCH.in_launch += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            WATCH.in_launch -= 1

    cls.run = run


def _wrap_autotuner() -> None:
    """Only the benchmarking of configurations is exempt (events, cache flushes, statistics); the
    user hooks around the real launch, and config pruning, are watched like any candidate code."""
    original = Autotuner._bench

    def _bench(self, *args, **kwargs):
        WATCH.paused += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            WATCH.paused -= 1

    Autotuner._bench = _bench


def _wrap_threads() -> None:
    original = threading.Thread.start

    def start(self, *args, **kwargs):
        WATCH.threads_started += 1
        return original(self, *args, **kwargs)

    threading.Thread.start = start


class TorchOpMonitor(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if WATCH.paused == 0 and name not in DATA_MOVEMENT_OPS:
            WATCH.torch_ops[f"aten.{name}"] += 1
        out = func(*args, **(kwargs or {}))
        if (WATCH.poison_byte is not None and name in ALLOCATION_OPS and WATCH.in_launch == 0
                and WATCH.paused == 0 and type(out) is torch.Tensor and out.numel()):
            out.untyped_storage().fill_(WATCH.poison_byte)  # uninitialised memory is the poison
        return out


def _digest(value, depth: int = 0) -> str:
    """A cheap fingerprint of module-level state, deep enough to see a cache being filled."""
    if depth > 4:
        return type(value).__name__
    if isinstance(value, (KernelInterface, JITFunction, types.ModuleType)):
        return type(value).__name__  # Triton's own caches change as it compiles; not the candidate's
    if isinstance(value, torch.Tensor):
        return f"T({value.data_ptr()},{tuple(value.shape)},{value.dtype})"  # a reused workspace is no change
    if isinstance(value, (int, float, complex, str, bytes, bool, type(None))):
        return repr(value)[:200]
    if isinstance(value, dict):
        items = list(value.items())[:256]
        return "{" + ",".join(f"{_digest(k, depth + 1)}:{_digest(v, depth + 1)}" for k, v in items) + f"}}#{len(value)}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_digest(v, depth + 1) for v in list(value)[:256]) + f"]#{len(value)}"
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(_digest(v, depth + 1) for v in list(value)[:256])) + f"}}#{len(value)}"
    if isinstance(value, functools._lru_cache_wrapper):
        return f"lru_cache({value.cache_info().currsize})"
    if isinstance(value, functools.partial):
        return f"partial({_digest(value.args, depth + 1)},{_digest(value.keywords, depth + 1)})"
    if isinstance(value, types.FunctionType):
        cells = [c.cell_contents for c in (value.__closure__ or ()) if _cell_filled(c)]
        return (f"fn({_digest(value.__defaults__, depth + 1)},{_digest(value.__kwdefaults__, depth + 1)},"
                f"{_digest(cells, depth + 1)},{_digest(vars(value), depth + 1)})")
    if getattr(type(value), "__module__", None) == CANDIDATE_MODULE or (
            isinstance(value, type) and value.__module__ == CANDIDATE_MODULE):
        try:
            return f"{type(value).__name__}({_digest(dict(vars(value)), depth + 1)})"
        except TypeError:
            pass
    return f"{type(value).__name__}@{id(value)}"


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


@triton.jit
def _warm_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def _warm_up(device: str) -> None:
    """Compile and launch one kernel of ours first, so that Triton's own lazily imported modules
    are in sys.modules before the snapshot the candidate's imports are compared with."""
    x = torch.zeros(16, device=device)
    _warm_kernel[(1,)](x, 16, BLOCK=16)
    if device == "cuda":
        torch.cuda.synchronize()


class CandidateServer:
    """Serves the judge's commands (call, time, save_timed, forget) with the loaded candidate, one JSON
    line per command on stdin, facts back on the reply channel."""

    def __init__(self, fn, device: str, reply, module=None, base_threads: set[str] | None = None) -> None:
        self.fn = fn
        self.base_threads = base_threads or set()  # Python threads alive before the candidate was imported
        self.device = device
        self.reply = reply
        self.module = module
        self.inputs: dict[str, dict] = {}
        self.keep: list[torch.Tensor] = []  # recent outputs stay alive so their memory is not reused
        self.timed: dict[int, torch.Tensor] = {}  # outputs of the last timing run, until saved
        self.state_base: dict[str, str] | None = None  # module state after a shape's first call
        # a file problem's run-time half (kernels/problems/kernelbench_runtime.py), whose inputs the timed calls use
        self.reference = getattr(fn, "reference", None)

    def _prepare(self, shape: dict | None, dtype: str | None) -> None:
        """A file problem's ModelNew is built for the shape before the call, outside the torch-op
        monitor: its constructor may draw parameters with torch, its forward may not compute."""
        if shape is not None and hasattr(self.fn, "prepare"):
            self.fn.prepare(shape, getattr(torch, dtype))

    def load(self, path: str) -> dict:
        if path not in self.inputs:
            self.inputs[path] = torch.load(path, map_location=self.device, weights_only=True)
        return self.inputs[path]

    def poison(self, nbytes: int, byte: int) -> None:
        """Fill the allocator's free memory with the poison byte: whatever the candidate gets without
        writing it (a stale block, a partial write) reads as poison (0xFF is NaN in every float type)."""
        blocks = []
        for size in (nbytes, nbytes, 2 * nbytes, 64 * 2**20):
            t = torch.empty(max(size, 4), dtype=torch.uint8, device=self.device)
            t.fill_(byte)
            blocks.append(t)
        del blocks

    def _begin(self, poison_byte: int | None, noop: bool = False) -> None:
        WATCH.reset()
        WATCH.poison_byte = poison_byte
        WATCH.disable_candidate_kernels = noop

    def _end(self) -> None:
        WATCH.poison_byte = None
        WATCH.disable_candidate_kernels = False

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

    def call(self, cmd: dict) -> dict:
        self._prepare(cmd.get("problem_shape"), cmd.get("input_dtype"))
        inputs = self.load(cmd["inputs"])
        expected_shape = tuple(cmd["shape"])
        expected_dtype = getattr(torch, cmd["dtype"])
        tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
        originals = [t.clone() for t in tensors]
        out_bytes = expected_dtype.itemsize * int(torch.tensor(expected_shape).prod().item())
        fill = int(cmd.get("fill", 0xFF)) & 0xFF
        self.poison(out_bytes, fill)
        if self.device == "cuda":
            torch.cuda.synchronize()
        threads_before = self.base_threads
        self._begin(fill, noop=bool(cmd.get("noop")))
        modules_before = set(sys.modules)
        t0 = time.perf_counter()
        try:
            with TorchOpMonitor():
                out = self.fn(**inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        finally:
            self._end()
        seconds = time.perf_counter() - t0
        problem = _output_problem(out, tensors, expected_shape, expected_dtype, self.device)
        if problem is None and any(out.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() for k in self.keep):
            problem = "returned the memory of an earlier call's output; return a new tensor every call"
        facts = {
            "kind": "called",
            "seconds": seconds,
            "kernels": list(dict.fromkeys(WATCH.launched)),
            "torch_ops": dict(WATCH.torch_ops),
            "new_modules": sorted(set(sys.modules) - modules_before),
            "inputs_mutated": [i for i, (t, o) in enumerate(zip(tensors, originals)) if not torch.equal(t, o)],
            "output_problem": problem,
            "side_streams": sorted(set(WATCH.side_streams)),
            "odd_args": sorted(set(WATCH.odd_args)),
            "threads_started": WATCH.threads_started,
            "threads_alive": sorted(set(self._threads()) - threads_before),
            "state_changed": [] if cmd.get("noop") else self._state_changes(),
        }
        if problem is None:
            self.keep = (self.keep + [out])[-4:]
            torch.save(out.detach().to("cpu"), cmd["output"])
        return facts

    def time(self, cmd: dict) -> dict:
        """Timed calls on fresh inputs: `slots` sets of buffers at addresses no check call saw, each
        refilled with new values (a fresh seed) before every call, outside the clock. Every output
        is kept, so that the judge can re-check the ones it picks afterwards."""
        reference = self.reference or importlib.import_module(f"kernels.problems.{cmd['problem']}.reference")
        self._prepare(cmd["shape"], cmd["dtype"])
        shape, dtype = cmd["shape"], getattr(torch, cmd["dtype"])
        seed0, n_slots = int(cmd["seed_base"]), max(int(cmd.get("slots", 2)), 1)
        expected_shape = tuple(reference.output_spec(shape, dtype)[0])
        slots = [reference.make_inputs(shape, seed0 + j, self.device, dtype) for j in range(n_slots)]
        self.timed.clear()
        self.keep.clear()
        seeds: dict[int, int] = {}
        kept_ptrs: set[int] = set()
        facts = {"torch_ops": Counter(), "foreign": set(), "idle_calls": [], "side_streams": set(), "odd_args": set(),
                 "threads_started": 0, "threads_alive": [], "output_problem": None, "new_modules": set()}
        threads_before = self.base_threads
        modules_before = set(sys.modules)

        def prepare(i: int, slot: int | None = None) -> dict:
            buffers = slots[i % n_slots if slot is None else slot]
            seed = seed0 + n_slots + i
            for name, value in reference.make_inputs(shape, seed, self.device, dtype).items():
                if isinstance(value, torch.Tensor):
                    buffers[name].copy_(value)
            seeds[i] = seed
            WATCH.reset()
            return buffers

        class Around:  # the torch-op monitor around each call; the stream it began on is the one
            def __init__(self, i: int) -> None:
                self.mode = TorchOpMonitor()

            def __enter__(self):
                WATCH.reset()
                self.mode.__enter__()

            def __exit__(self, *exc):
                return self.mode.__exit__(*exc)

        def record(i: int, out, copy: bool = False) -> None:
            """After call i, outside the clock. copy: a CUDA-graph replay, whose output buffer the
            next replay overwrites and which runs none of the candidate's Python."""
            if not copy:
                facts["torch_ops"].update(WATCH.torch_ops)
                launched = list(dict.fromkeys(WATCH.launched))
                facts["foreign"].update(k for k in launched if not k.startswith(CANDIDATE_MODULE + "."))
                if not any(k.startswith(CANDIDATE_MODULE + ".") for k in launched):
                    facts["idle_calls"].append(i)
                facts["side_streams"].update(WATCH.side_streams)
                facts["odd_args"].update(WATCH.odd_args)
                facts["threads_started"] += WATCH.threads_started
            alive = sorted(set(self._threads()) - threads_before)
            if alive and not facts["threads_alive"]:
                facts["threads_alive"] = alive
            problem = _output_problem(out, [], expected_shape, dtype, self.device)
            if problem is None and not copy:
                ptr = out.untyped_storage().data_ptr()
                if ptr in kept_ptrs:
                    problem = "returned the memory of an earlier timed call's output; return a new tensor every call"
                kept_ptrs.add(ptr)
            if problem and facts["output_problem"] is None:
                facts["output_problem"] = f"{problem} (timed call {i})"
            if problem is None:
                self.timed[i] = out.detach().clone() if copy else out

        result = timing.time_fn(self.fn, [], self.device, int(cmd["reps"]), int(cmd["warmup"]),
                                prepare=prepare, record=record, around=Around,
                                sync_reps=int(cmd.get("sync_reps", 0)), graph=bool(cmd.get("graph", True)),
                                graph_slots=n_slots)
        facts["state_changed"] = self._state_changes()
        facts["new_modules"] = sorted(set(sys.modules) - modules_before)
        facts = {k: (sorted(v) if isinstance(v, set) else dict(v) if isinstance(v, Counter) else v)
                 for k, v in facts.items()}
        return {"kind": "timed", **result, "seeds": seeds, "facts": facts}

    def save_timed(self, cmd: dict) -> dict:
        saved = {}
        for i in cmd["indices"]:
            out = self.timed.get(int(i))
            if out is not None:
                path = os.path.join(cmd["dir"], f"timed_{int(i)}.pt")
                torch.save(out.detach().to("cpu"), path)
                saved[str(int(i))] = path
        self.timed.clear()
        return {"kind": "saved", "files": saved}

    def serve(self, stream) -> None:
        for line in stream:
            cmd = json.loads(line)
            op = cmd.get("op")
            if op == "exit":
                return
            if op == "forget":
                self.inputs.clear()
                self.keep.clear()
                self.timed.clear()
                self.state_base = None
                if self.device == "cuda":
                    torch.cuda.empty_cache()
                self.reply({"kind": "forgot"})
                continue
            try:
                handler = {"call": self.call, "time": self.time, "save_timed": self.save_timed}[op]
                self.reply(handler(cmd))
            except Exception as exc:
                text = traceback.format_exc(limit=8)
                fatal = "CUDA" in text or "cuda" in type(exc).__name__.lower()
                self.reply({"kind": "error", "error": text[-6000:], "compile": _is_compile_error(exc), "fatal": fatal})
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
    if out.device.type != device:
        return f"returned a tensor on {out.device}; expected {device}"
    own = out.untyped_storage().data_ptr()
    if any(t.untyped_storage().data_ptr() == own for t in inputs):
        return "the output shares memory with an input; return a new tensor"
    return None


def _file_problem_entry(cls, args):
    """The candidate's ModelNew, wrapped to be built per shape with Model's parameters."""
    from kernels.problems.kernelbench_runtime import CandidateModel, FileReference
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise TypeError(f"{args.entry} must be a torch.nn.Module subclass")
    with open(args.problem_file) as f:
        reference = FileReference(args.problem_name, f.read())
    reference.param_seed = args.param_seed
    return CandidateModel(cls, reference, args.device)


# What the judge's assignment (the first line on stdin) holds besides the nonce, with defaults.
ASSIGNMENT_DEFAULTS = {"candidate": None, "entry": None, "device": None, "problem_file": None, "problem_name": None,
                       "param_seed": 0, "seccomp": 1, "landlock": 1, "landlock_reads": 1, "landlock_exec": 1,
                       "netns": 1, "drop_capabilities": 1, "writable": "", "readable": "", "toolchain": "none",
                       "gpu_memory_fraction": 0.0, "fsize": None}


def _paths(joined: str) -> list[str]:
    return [p for p in joined.split(os.pathsep) if p]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reply-fd", type=int, required=True)
    args = ap.parse_args(argv)
    # before any code of the candidate's: what it starts cannot read this process's memory (the
    # nonce, the channel) through /proc
    dumpable_off = confinement.make_non_dumpable()
    channel = os.fdopen(args.reply_fd, "w", buffering=1)
    # The process may be started ahead of need (the judge starts it while it prepares inputs and
    # references, or before it has a request at all): torch and Triton are imported by now, and it
    # knows nothing of its evaluation until this line, the judge's assignment. It carries this run's
    # nonce, which every reply carries back, so a line the candidate writes into the channel (were it
    # ever to reach the descriptor) is told apart from ours. No line (the judge closed the pipe
    # unassigned): nothing to do.
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    assignment = json.loads(line)
    nonce = assignment.get("nonce", "")
    args = argparse.Namespace(**{**ASSIGNMENT_DEFAULTS, **{k: v for k, v in assignment.items() if k != "nonce"}})
    if not (args.candidate and args.entry and args.device):
        print("candidate_process: an assignment names the candidate, its entry point and the device", file=sys.stderr)
        return 2
    if args.fsize:  # the largest output this evaluation saves, and a log: a disk filler dies of SIGXFSZ
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(args.fsize), int(args.fsize)))

    def reply(obj: dict) -> None:
        channel.write(json.dumps({**obj, "nonce": nonce}) + "\n")
        channel.flush()

    _warm_up(args.device)
    for cls in (JITFunction, InterpretedFunction):
        if cls is not None:
            _wrap_run(cls)
    _wrap_autotuner()
    _wrap_threads()
    fences = {}
    if args.device == "cuda":
        WATCH.device_index = torch.cuda.current_device()
        if args.gpu_memory_fraction > 0:  # a GPU memory bomb ends here, leaving the judge its share
            torch.cuda.set_per_process_memory_fraction(args.gpu_memory_fraction)
            fences["gpu_memory_fraction"] = args.gpu_memory_fraction
    # The fences go up now, with CUDA and Triton started and before any code of the candidate's
    # (kernels/evaluator/fences.py: what may be read, written and started, and why in this order).
    fences.update(sandbox_fences.put_up(
        args.device, writable=_paths(args.writable), readable=_paths(args.readable), toolchain=args.toolchain,
        netns=bool(args.netns), landlock=bool(args.landlock), landlock_reads=bool(args.landlock_reads),
        landlock_exec=bool(args.landlock_exec), seccomp=bool(args.seccomp),
        drop_capabilities=bool(args.drop_capabilities)))
    fences["non_dumpable"] = dumpable_off
    reply({"kind": "fenced", "fences": fences})
    modules_before = set(sys.modules)
    base_threads = {t.name for t in threading.enumerate() if t is not threading.main_thread()}
    t0 = time.perf_counter()
    try:
        spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, args.candidate)
        module = importlib.util.module_from_spec(spec)
        sys.modules[CANDIDATE_MODULE] = module
        spec.loader.exec_module(module)
    except BaseException:
        reply({"kind": "error", "compile": True, "fatal": True, "error": traceback.format_exc(limit=8)[-6000:]})
        return 0
    fn = vars(module).get(args.entry)
    if not callable(fn):
        reply({"kind": "error", "compile": True, "fatal": True, "error": f"the module defines no callable {args.entry}"})
        return 0
    new_modules = sorted(set(sys.modules) - modules_before - {CANDIDATE_MODULE})
    if args.problem_file:  # the problem's own imports are not the candidate's
        try:
            fn = _file_problem_entry(fn, args)
        except BaseException:
            reply({"kind": "error", "compile": True, "fatal": True, "error": traceback.format_exc(limit=8)[-6000:]})
            return 0
    reply({"kind": "ready", "import_s": time.perf_counter() - t0, "new_modules": new_modules,
           "banned_modules": [m for m in new_modules if policy.module_violation(m)], "fences": fences,
           "threads": len(threading.enumerate())})
    CandidateServer(fn, args.device, reply, module, base_threads).serve(sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
