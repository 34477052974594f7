"""Judged candidates per GPU-hour, and where a verdict's seconds go, for each problem.

One process plays an evaluation worker: it judges one kernel again and again through evaluate(),
one evaluation at a time (as one worker per GPU does), with the worker's baseline cache
(kernels/evaluator/baseline_cache.py), and records each verdict's wall time and phases (Verdict.phases_s;
judge_process is what the judge's own clock does not see: starting it, or handing the request to a
spare, and its exit). Per problem, in this order:

  first   judges started on demand, the baseline cache empty: a fresh worker's first evaluation
  cold    judges started on demand, baselines reused: every evaluation before judges were started ahead
  warm    judges started ahead of need (JudgePool), back to back, baselines reused: a worker's second
          and later evaluations. The first evaluation after the pool is turned on is kept apart
          (warm_start): its spare was still starting, as on a worker that has just come up.

candidates_per_gpu_hour = 3600 / the group's median wall seconds (one evaluation at a time per GPU).
The request is profile_kernel's (mode full, the device's default shape set: smoke on the CPU,
bench on CUDA, one random probe shape, three seeds).

    python3 bench/throughput.py                       # CPU: tiny shapes, bench/results/cpu/throughput.json
    python3 bench/throughput.py --device cuda --kernel tuned --out OUT/throughput.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from kernels.evaluator.baseline_cache import BaselineCache
from kernels.evaluator.evaluate import JUDGES, evaluate, request_for
from kernels.problems.spec import PROBLEM_NAMES, get_problem, resolve_kernel

ROOT = Path(__file__).resolve().parent.parent


def judge_once(problem: str, kernel: str, device: str, cache: BaselineCache, group: str) -> dict:
    req = request_for(problem, kernel, device=device, mode="full", known_baselines=cache.known(problem, device))
    t0 = time.monotonic()
    verdict = evaluate(req)
    wall = time.monotonic() - t0
    cache.learn(problem, device, verdict)
    reused = sum(len(r.baselines_reused) for r in verdict.shapes)
    row = {"group": group, "status": verdict.status, "wall_s": round(wall, 3), "elapsed_s": verdict.elapsed_s,
           "phases_s": verdict.phases_s, "baselines_timed": sum(len(r.baselines) for r in verdict.shapes) - reused,
           "baselines_reused": reused, "warm_judge": bool(verdict.sandbox.get("warm_judge")),
           "candidate_prestarted": bool(verdict.sandbox.get("prestarted")),
           "device": verdict.device, "gpu": verdict.gpu.name if verdict.gpu else None}
    if verdict.status != "ok":
        row["reason"] = verdict.reason[-500:]
    print(f"{problem:10s} {group:10s} {verdict.status:9s} {wall:7.2f} s  "
          + " ".join(f"{k}={v:.2f}" for k, v in verdict.phases_s.items()), flush=True)
    return row


def summarize(rows: list[dict]) -> dict:
    out = {}
    for group in dict.fromkeys(r["group"] for r in rows):
        picked = [r for r in rows if r["group"] == group]
        names = list(dict.fromkeys(k for r in picked for k in r["phases_s"]))
        wall = statistics.median(r["wall_s"] for r in picked)
        out[group] = {"evaluations": len(picked), "median_wall_s": round(wall, 3),
                      "candidates_per_gpu_hour": round(3600.0 / wall, 1) if wall > 0 else None,
                      "median_phases_s": {k: round(statistics.median(r["phases_s"].get(k, 0.0) for r in picked), 3)
                                          for k in names}}
    return out


def measure(problem: str, kernel: str, device: str, cold: int, warm: int) -> dict:
    cache = BaselineCache()
    JUDGES.keep_warm(0)
    rows = [judge_once(problem, kernel, device, cache, "first")]
    rows += [judge_once(problem, kernel, device, cache, "cold") for _ in range(cold)]
    JUDGES.keep_warm(1)
    rows += [judge_once(problem, kernel, device, cache, "warm_start" if i == 0 else "warm") for i in range(warm + 1)]
    JUDGES.keep_warm(0)
    return {"evaluations": rows, "summary": summarize(rows)}


def host_folder(gpu: str | None) -> str:
    """bench/results/<folder>: "cpu", or the GPU's model ("NVIDIA H200" -> "h200")."""
    return "cpu" if not gpu or gpu == "cpu" else gpu.split()[-1].lower()


def _count(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text}: a count of evaluations, 0 or more")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--problem", action="append", choices=PROBLEM_NAMES,
                    help="a problem to measure (repeatable; default: every built-in problem)")
    ap.add_argument("--kernel", default="starter", help="the shipped kernel judged (starter or tuned)")
    ap.add_argument("--cold", type=_count, default=2, help="cold evaluations after the first (default 2)")
    ap.add_argument("--warm", type=_count, default=3, help="warm evaluations after the warm start (default 3)")
    ap.add_argument("--out", help="the record to write (default: bench/results/<host>/throughput.json)")
    args = ap.parse_args(argv)
    problems = list(dict.fromkeys(args.problem or PROBLEM_NAMES))
    for problem in problems:  # a kernel no problem ships fails here, before any evaluation
        try:
            resolve_kernel(get_problem(problem), args.kernel)
        except (OSError, ValueError) as exc:
            print(f"throughput: --kernel {args.kernel}: not a kernel of {problem} ({str(exc).splitlines()[0]})",
                  file=sys.stderr)
            return 2
    figures: dict = {"device": args.device, "kernel": args.kernel, "problems": {}}
    out = Path(args.out) if args.out else None
    for problem in problems:
        figures["problems"][problem] = measure(problem, args.kernel, args.device, args.cold, args.warm)
        if out:  # what is done so far, should a time limit end the rest
            out.parent.mkdir(parents=True, exist_ok=True)
            out.with_suffix(".partial.json").write_text(json.dumps(figures, indent=1) + "\n")
    # host facts last: they start CUDA in this process, which must not be on the GPU while judges time
    from record_verdict import build
    command = "python3 bench/throughput.py " + " ".join(argv if argv is not None else sys.argv[1:])
    record = build(json.dumps(figures), f"judged candidates per GPU-hour and seconds per verdict by phase "
                   f"({args.kernel} kernel, first / cold / warm evaluations on one worker)", command.strip(), figures=True)
    if out:
        out.with_suffix(".partial.json").unlink(missing_ok=True)
    else:
        out = ROOT / "bench" / "results" / host_folder(record.host.gpu) / "throughput.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json.loads(record.model_dump_json()), indent=1) + "\n")
    for problem, found in figures["problems"].items():
        for group, s in found["summary"].items():
            print(f"{problem:10s} {group:10s} median {s['median_wall_s']:7.2f} s  "
                  f"{s['candidates_per_gpu_hour']:8.1f} candidates/GPU-hour")
    print(f"wrote {out}")
    bad = [r for f in figures["problems"].values() for r in f["evaluations"] if r["status"] != "ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
