"""Evaluate shipped kernels with `marathon eval` semantics and keep the raw verdicts.

    python bench/evaluate_kernels.py --problem kda --kernel starter --shapes bench [--out .marathon/bench]

Writes <out>/<problem>_<kernel>_<shapes>.json: the verdict exactly as `marathon eval --json` prints
it, plus the host it ran on. Prints one summary line per shape."""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from kernels.evaluator.evaluate import evaluate, request_for
from kernels.problems.spec import parse_shape


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", required=True)
    ap.add_argument("--kernel", action="append", required=True)
    ap.add_argument("--shapes", default="bench")
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--baseline", action="append", default=[], help="time only this baseline (repeatable)")
    ap.add_argument("--tag", default=None, help="file-name tag instead of the shape-set name")
    ap.add_argument("--out", default=".marathon/bench")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    worst = 0
    for kernel in args.kernel:
        shapes = [parse_shape(s) for s in args.shape]
        req = request_for(args.problem, kernel, device=args.device, shape_set=None if shapes else args.shapes,
                          shapes=shapes, timeout_s=args.timeout, only_baselines=args.baseline)
        t0 = time.time()
        verdict = evaluate(req)
        record = {"verdict": json.loads(verdict.model_dump_json()), "host": platform.node(),
                  "command": " ".join(sys.argv), "wall_s": round(time.time() - t0, 1),
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        tag = args.tag or (args.shapes if not shapes else "custom")
        path = out_dir / f"{args.problem}_{Path(kernel).stem}_{tag}.json"
        path.write_text(json.dumps(record, indent=2))
        gpu = verdict.gpu.name if verdict.gpu else verdict.device
        print(f"{args.problem}/{kernel} [{gpu}] {verdict.status}: {verdict.reason[:300]}")
        for r in verdict.shapes:
            sp = " ".join(f"{k}={v:.2f}x({r.baselines[k]:.1f}us)" for k, v in r.speedup.items())
            g = r.timing.graph_median_us if r.timing else None
            print(f"  {r.shape} rel={r.rel_err} lat={r.latency_us}us graph={g}us roof={r.roofline_pct}% {sp}")
        for f in verdict.flags:
            print("  flag:", f)
        worst = max(worst, 0 if verdict.ok else 1)
    return worst


if __name__ == "__main__":
    sys.exit(main())
