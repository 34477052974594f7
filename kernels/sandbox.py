"""The candidate's process. The judge starts it in a scratch directory, in its own process group,
with a clean environment and resource limits; it is the only place candidate code ever runs.

It reports facts (which kernels launched, which torch ops ran, whether the output is a plain new
tensor, whether inputs changed) as JSON lines on a dedicated pipe; it decides nothing. Inputs come
from files the judge wrote; outputs go back as files; the reference never enters this process."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from collections import Counter

import torch
import triton
import triton.language as tl
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

from kernels import policy, timing

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
    "sym_storage_offset", "is_contiguous", "is_same_size", "dim", "numel", "size", "stride",
})
try:
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - older Triton
    InterpretedFunction = None


class Watch:
    """Kernel launches and torch ops during one candidate call."""

    def __init__(self) -> None:
        self.launched: list[str] = []
        self.torch_ops: Counter[str] = Counter()
        self.paused = 0  # > 0 inside Triton launches and autotuning: their torch use is Triton's own
        self.disable_candidate_kernels = False

    def reset(self) -> None:
        self.launched.clear()
        self.torch_ops.clear()


WATCH = Watch()


def _kernel_name(fn) -> tuple[str, bool]:
    inner = getattr(fn, "fn", fn)
    module = getattr(inner, "__module__", "?")
    return f"{module}.{getattr(inner, '__qualname__', '?')}", module == CANDIDATE_MODULE


def _wrap_run(cls) -> None:
    original = cls.run

    def run(self, *args, **kwargs):
        if not kwargs.get("warmup", False):
            name, own = _kernel_name(self)
            WATCH.launched.append(name)
            if own and WATCH.disable_candidate_kernels:
                return None
        WATCH.paused += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            WATCH.paused -= 1

    cls.run = run


def _wrap_autotuner() -> None:
    original = Autotuner.run

    def run(self, *args, **kwargs):
        WATCH.paused += 1  # its benchmarking uses torch (events, cache flushes, statistics)
        try:
            return original(self, *args, **kwargs)
        finally:
            WATCH.paused -= 1

    Autotuner.run = run


class TorchOpMonitor(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if WATCH.paused == 0:
            name = func.overloadpacket.__name__
            if name not in DATA_MOVEMENT_OPS:
                WATCH.torch_ops[f"aten.{name}"] += 1
        return func(*args, **(kwargs or {}))


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


class Session:
    def __init__(self, fn, device: str, reply) -> None:
        self.fn = fn
        self.device = device
        self.reply = reply
        self.inputs: dict[str, dict] = {}
        self.keep: list[torch.Tensor] = []  # recent outputs stay alive so their memory is not reused

    def load(self, path: str) -> dict:
        if path not in self.inputs:
            self.inputs[path] = torch.load(path, map_location=self.device, weights_only=True)
        return self.inputs[path]

    def poison(self, nbytes: int) -> None:
        """Hand the candidate NaN-filled memory: a kernel that leaves part of its output unwritten
        returns NaN there instead of whatever an earlier call left behind."""
        blocks = []
        for size in (nbytes, nbytes, 2 * nbytes, 64 * 2**20):
            t = torch.empty(max(size, 4) // 4, dtype=torch.float32, device=self.device)
            t.fill_(float("nan"))
            blocks.append(t)
        del blocks

    def call(self, cmd: dict) -> dict:
        inputs = self.load(cmd["inputs"])
        expected_shape = tuple(cmd["shape"])
        expected_dtype = getattr(torch, cmd["dtype"])
        tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
        originals = [t.clone() for t in tensors]
        out_bytes = expected_dtype.itemsize * int(torch.tensor(expected_shape).prod().item())
        self.poison(out_bytes)
        if self.device == "cuda":
            torch.cuda.synchronize()
        WATCH.reset()
        WATCH.disable_candidate_kernels = bool(cmd.get("noop"))
        modules_before = set(sys.modules)
        t0 = time.perf_counter()
        try:
            with TorchOpMonitor():
                out = self.fn(**inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        finally:
            WATCH.disable_candidate_kernels = False
        seconds = time.perf_counter() - t0
        facts = {
            "kind": "called",
            "seconds": seconds,
            "kernels": list(dict.fromkeys(WATCH.launched)),
            "torch_ops": dict(WATCH.torch_ops),
            "new_modules": sorted(set(sys.modules) - modules_before),
            "inputs_mutated": [i for i, (t, o) in enumerate(zip(tensors, originals)) if not torch.equal(t, o)],
            "output_problem": _output_problem(out, tensors, expected_shape, expected_dtype, self.device),
        }
        if facts["output_problem"] is None:
            self.keep = (self.keep + [out])[-4:]
            torch.save(out.detach().to("cpu"), cmd["output"])
        return facts

    def time(self, cmd: dict) -> dict:
        sets = [self.load(p) for p in cmd["inputs"]]
        result = timing.time_fn(self.fn, sets, self.device, int(cmd["reps"]), int(cmd["warmup"]))
        return {"kind": "timed", **result}

    def serve(self, stream) -> None:
        for line in stream:
            cmd = json.loads(line)
            op = cmd.get("op")
            if op == "exit":
                return
            if op == "forget":
                self.inputs.clear()
                self.keep.clear()
                self.reply({"kind": "forgot"})
                continue
            try:
                self.reply(self.call(cmd) if op == "call" else self.time(cmd))
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--entry", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--reply-fd", type=int, required=True)
    args = ap.parse_args(argv)
    channel = os.fdopen(args.reply_fd, "w", buffering=1)

    def reply(obj: dict) -> None:
        channel.write(json.dumps(obj) + "\n")
        channel.flush()

    _warm_up(args.device)
    for cls in (JITFunction, InterpretedFunction):
        if cls is not None:
            _wrap_run(cls)
    _wrap_autotuner()
    modules_before = set(sys.modules)
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
    reply({"kind": "ready", "import_s": time.perf_counter() - t0, "new_modules": new_modules,
           "banned_modules": [m for m in new_modules if policy.module_violation(m)]})
    Session(fn, args.device, reply).serve(sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
