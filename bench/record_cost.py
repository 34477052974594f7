"""What the record and the seal cost per candidate call, on this machine's CPU (Triton's interpreter):

    python bench/record_cost.py [--calls 200] > figures.json

In one process set up as the sandbox sets itself up (the launch wrappers writing the record to
/dev/null, the seal's audit hook on, a candidate module loaded from its own file): the median time of
a small candidate call (an allocation and one interpreted kernel launch) bare and inside the harness's
per-call context (begin marker, the torch-op monitor, the state check, the probe op, end marker);
the same under the torch-op monitor alone (as the harness ran calls before the record); the cost of
one launch record line; what the audit hook adds to an event it does not watch (id());
and the seal's decision on a watched event raised 20 torch frames deep under harness code (the walk of
the stack it makes). Figures in microseconds, for bench/record_verdict.py --figures."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import torch
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from kernels.evaluator import candidate_process as cp
from kernels.evaluator import seal

CANDIDATE = '''import torch
import triton
import triton.language as tl


@triton.jit
def _add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def call(x):
    y = torch.empty_like(x)
    _add_one[(1,)](x, y, x.numel(), BLOCK=16)
    return y
'''


def median_us(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return round(statistics.median(times), 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="marathon-record-cost-"))
    cand = scratch / "candidate.py"
    cand.write_text(CANDIDATE)
    sink = os.open(os.devnull, os.O_WRONLY)
    id_before = median_us(lambda: id(scratch), args.calls * 10)
    channel = cp.Channel(sink, "n")
    recorder = cp.Recorder(channel, stack_owner=None)
    cp._warm_up("cpu")  # as the sandbox does before the seal: torch's and Triton's lazy set-up done
    for cls in (JITFunction, InterpretedFunction):
        cp._wrap_run(cls, recorder)
    # a stack 20 torch frames deep on top of harness code (functions compiled under those files' names)
    deep: dict = {}
    torch_file = str(Path(torch.__file__).parent / "functional.py")
    exec(compile("import sys, time\ndef f0(verdict, path, n):\n    ts = []\n    for _ in range(n):\n"
                 "        t0 = time.perf_counter()\n        verdict('open', (path, 'r', 0), sys._getframe())\n"
                 "        ts.append((time.perf_counter() - t0) * 1e6)\n    return ts\n", torch_file, "exec"), deep)
    for depth in range(1, 20):
        exec(compile(f"def f{depth}(verdict, path, n):\n    return f{depth - 1}(verdict, path, n)\n", torch_file, "exec"), deep)
    exec(compile("def top(verdict, path, n):\n    return f19(verdict, path, n)\n", str(Path(cp.__file__)), "exec"), deep)
    sealed = seal.install(candidate_file=str(cand), scratch=str(scratch), workdir=str(scratch),
                          triton_cache=str(scratch), channel_fd=2, nonce="n", mode="on")  # a kill's line on stderr
    recorder.stack_owner = sealed.stack_owner
    spec = importlib.util.spec_from_file_location("candidate", cand)
    module = importlib.util.module_from_spec(spec)
    module.__builtins__ = seal.candidate_builtins(sealed.check_import)
    spec.loader.exec_module(module)
    probe = torch.zeros(1)
    monitor = cp.make_monitor(recorder, probe)
    x = torch.zeros(16)

    def bare():
        module.call(x)

    def recorded():
        with cp.Around(recorder, monitor, probe, 0):
            module.call(x)

    def context_only():  # the per-call context around a call that does nothing
        with cp.Around(recorder, monitor, probe, 0):
            pass

    def monitor_only():
        with monitor():
            pass

    def monitored():  # the torch-op monitor alone, as the harness ran it before the record and the seal
        with monitor():
            module.call(x)

    line = {"name": "candidate._add_one", "own": True, "side": False, "odd": []}
    decisions = deep["top"](sealed.verdict, str(cand), args.calls)
    figures = {
        "bare_call_us": median_us(bare, args.calls),
        "monitored_call_us": median_us(monitored, args.calls),
        "recorded_call_us": median_us(recorded, args.calls),
        "record_line_us": median_us(lambda: recorder.send(cp.LaunchRecord(**line)), args.calls),
        "empty_call_in_context_us": median_us(context_only, args.calls * 5),
        "empty_call_in_monitor_only_us": median_us(monitor_only, args.calls * 5),
        "unwatched_event_before_us": id_before,
        "unwatched_event_sealed_us": median_us(lambda: id(scratch), args.calls * 10),
        "watched_event_decision_us": round(statistics.median(decisions), 2),
        "calls": args.calls,
        "note": "monitored: the torch-op monitor alone (as before the record); recorded: the harness's whole "
                "per-call context (markers, monitor, state check, probe, launch record) with the seal on; the "
                "interpreted calls vary with the machine's load, the empty calls isolate the context's own cost; "
                "the decision walks the stack from the event, through 20 torch frames, to the harness frame",
    }
    figures["context_over_monitor_us"] = round(figures["empty_call_in_context_us"]
                                               - figures["empty_call_in_monitor_only_us"], 2)
    print(json.dumps(figures, indent=1))  # to stdout: the seal (on in this process) lets this script open no file
    return 0


if __name__ == "__main__":
    sys.exit(main())
