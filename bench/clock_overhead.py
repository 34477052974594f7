"""Where a clocked batch's time goes on a GPU: the judge's clock (kernels/evaluator/judge.py `_clock`)
times a CUDA graph of the inputs' perturbation, the calls and the output digest; its flag compares the
per-call share with the time the sandbox reported. This splits that share for one candidate, outside any
sandbox: each part captured and replayed alone, timed by CUDA events.

    python bench/clock_overhead.py [--problem docs/examples/silu_scale.py --kernel docs/examples/silu_scale_kernel.py
                                    --shape batch_size=4096,dim=8192 --dtype bfloat16 --calls 16] [--out FILE]

Prints and writes JSON: per call, in us, the perturbation alone, the calls alone, the digest alone, the
whole batch as the judge captures it, and one call after an L2 flush (what the sandbox reports)."""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
from pathlib import Path

import torch

from kernels.evaluator import timing
from kernels.evaluator.hostinfo import host_facts
from kernels.problems.kernelbench_runtime import CandidateModel, FileReference


def graph_us(fn, reps: int = 10) -> float:
    """Median replay time of `fn` captured as one CUDA graph."""
    g = timing.captured(fn)
    times = []
    for _ in range(reps + 2):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1000)
    return statistics.median(times[2:])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", default="docs/examples/silu_scale.py")
    ap.add_argument("--kernel", default="docs/examples/silu_scale_kernel.py")
    ap.add_argument("--shape", default="batch_size=4096,dim=8192")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--calls", type=int, default=16)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    shape = {k: int(v) for k, v in (kv.split("=") for kv in args.shape.split(","))}
    dtype = getattr(torch, args.dtype)
    problem = FileReference(Path(args.problem).stem, Path(args.problem).read_text())
    spec = importlib.util.spec_from_file_location("candidate", args.kernel)  # a trusted example, unsandboxed
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = CandidateModel(module.ModelNew, problem, "cuda")
    fn.prepare(shape, dtype)
    sets = [problem.make_inputs(shape, seed, "cuda", dtype) for seed in range(args.calls)]
    params = torch.tensor([7919, 13, 104729, 17], dtype=torch.int64, device="cuda")
    digest = timing.ClockDigest(timing.digest_weights(timing.DIGEST_ELEMENTS, 5, 3, "cuda"))
    outs = [fn(**s) for s in sets]
    n = args.calls
    parts = {
        "perturbation": graph_us(lambda: timing.perturb_sets(sets, params[0], params[1])) / n,
        "calls": graph_us(lambda: [fn(**s) for s in sets]) / n,
        "digest": graph_us(lambda: digest.compute(outs, params[2], params[3])) / n,
        "batch": graph_us(lambda: (timing.perturb_sets(sets, params[0], params[1]),
                                   digest.compute([fn(**s) for s in sets], params[2], params[3]))) / n,
    }
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    cold = []
    for _ in range(12):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(**sets[0])
        e.record()
        e.synchronize()
        cold.append(s.elapsed_time(e) * 1000)
    parts["one_call_cold"] = statistics.median(cold[2:])
    perturbed = timing._perturbed_name(sets[0])
    report = {"host": host_facts(), "problem": args.problem, "kernel": args.kernel, "shape": shape, "dtype": args.dtype,
              "calls": n, "perturbed_input": perturbed,
              "perturbed_bytes": sets[0][perturbed].numel() * sets[0][perturbed].element_size() if perturbed else 0,
              "per_call_us": {k: round(v, 3) for k, v in parts.items()}}
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
