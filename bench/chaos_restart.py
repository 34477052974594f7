"""Restart to next tool call: seconds from starting the killed processes again to the next activity
attempt starting, per restart case of the chaos drills (serving/chaos.py), on this host (CPU).

Each case is a small LLM run against a real Temporal dev server, worker processes and a scripted
model endpoint; the fault is a SIGKILL of the workflow worker (mid model turn), the evaluation worker,
the server, all three, or all three with the state directory moved (each mid-evaluation). The times
come from the history's ActivityTaskStarted event times against the wall clock at the restart.
Writes one ResultRecord (kernels/evaluator/result_record.py)."""
from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    import os
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from serving.chaos import HEARTBEAT_S, RESTART_CASES, run_case
    from kernels.evaluator.result_record import Host, ResultRecord
    from workflows.models import RunSpec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(RESTART_CASES), help=f"comma-separated, of {', '.join(RESTART_CASES)}")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each case")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cpu" / "chaos_restart.json")
    args = ap.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in RESTART_CASES]
    if bad or args.repeat < 1:
        print(f"chaos_restart.py: unknown case(s) {', '.join(bad)}; cases: {', '.join(RESTART_CASES)}"
              if bad else "chaos_restart.py: --repeat must be at least 1", file=sys.stderr)
        return 2

    per_case: dict[str, list[float]] = {}
    for case in cases:
        for i in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="chaos-restart-") as tmp:
                t0 = time.monotonic()
                out = asyncio.run(run_case(case, Path(tmp)))
                wall = time.monotonic() - t0
            s = out.restart_to_next_call_s
            if s is None:
                print(f"{case}: no activity started after the restart", file=sys.stderr)
                return 1
            per_case.setdefault(case, []).append(round(s, 2))
            print(f"{case} #{i + 1}: next tool call {s:.2f} s after the restart ({out.report.tool_calls} tool calls, "
                  f"case took {wall:.0f} s)", flush=True)
    every = [x for xs in per_case.values() for x in xs]
    median = statistics.median(every)
    print(f"median over {len(every)} restarts: {median:.2f} s")

    import temporalio
    import torch
    import triton
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    command = "python bench/chaos_restart.py" + (f" --cases {args.cases}" if cases != list(RESTART_CASES) else "") + (
        f" --repeat {args.repeat}" if args.repeat != 1 else "")
    record = ResultRecord(
        measurement="chaos suite: seconds from restarting killed processes to the next activity attempt started",
        host=Host(gpu="cpu", driver=None, torch=torch.__version__, triton=triton.__version__,
                  python=platform.python_version(), baseline_libraries={}),
        command=command, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), commit=commit or None,
        figures={"restart_to_next_call_s": per_case, "median_s": round(median, 2), "restarts": len(every),
                 "settings": {"evaluation heartbeat_timeout_s": HEARTBEAT_S,
                              "control activities heartbeat_timeout_s": RunSpec.model_fields["heartbeat_timeout_s"].default,
                              "temporalio": temporalio.__version__, "cpus": os.cpu_count()}})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(record.model_dump_json(indent=2) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
