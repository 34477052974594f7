"""Nsight Compute on the GPU host, for the shipped tuned kernels (steps 1-2 by default; 3 and 4 on request).

    python bench/ncu_probe.py --out DIR [--problem mla_decode|kda ...]

1. The path profile_kernel uses (`activities.evaluation.ncu_metrics`): the judge run again under
   `ncu --target-processes all`, the candidate inside the evaluator's sandbox. Does it capture the
   candidate's kernels through the sandbox's fences, and how long does it take? -> DIR/ncu_metrics.json
2. A detailed report of each tuned kernel at its first bench shape, outside the sandbox (a plain
   process calling the shipped kernel after a warm-up), with the sections that say where the time
   goes: speed of light, occupancy, launch statistics, warp stall reasons, memory workload.
   -> DIR/ncu_<problem>.txt (ncu's own text) and the command in ncu_metrics.json
3. With --fences: path 1 again for the first problem with each of the sandbox's OS fences switched
   off in turn (the judge's MARATHON_SANDBOX_* switches). On the H200 the candidate's process died
   with SIGSEGV under ncu with all fences up; which fence does ncu's injection trip over?
   -> "fences" in ncu_metrics.json (this runs the candidate less fenced: the shipped kernels only)
4. With --source KERNEL: the full metric set of one launch of the tuned kernel named KERNEL (of the
   first --problem, default kda; e.g. _kda_prep, or _mla_split_kernel with --problem mla_decode), per
   SASS instruction (ncu --page source --print-source sass --csv, warp stall
   samples included), gzipped -> DIR/ncu_<KERNEL without leading _>_sass.csv.gz: where inside the kernel the time goes
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# the shipped tuned kernels' Triton kernels, as the evaluator names those of a candidate
TUNED_KERNELS = [f"candidate.{name}" for name in ("_mla_split_kernel", "_mla_merge_kernel", "_kda_prep", "_kda_scan")]
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis",
            "SchedulerStats", "ComputeWorkloadAnalysis")


def run_kernel(problem: str) -> None:
    """Child mode: the tuned kernel at the problem's first bench shape, three calls (ncu profiles the last)."""
    import torch

    from kernels.problems.spec import get_problem
    spec = get_problem(problem)
    shape = spec.shapes("bench")[0]
    ref_mod = __import__(f"kernels.problems.{problem}.reference", fromlist=["make_inputs"])
    tuned = __import__(f"kernels.problems.{problem}.tuned", fromlist=["x"])
    entry = getattr(tuned, spec.entry_point)
    inputs = ref_mod.make_inputs(shape, 0, "cuda", torch.bfloat16)
    for _ in range(3):
        entry(**inputs)
    torch.cuda.synchronize()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--problem", action="append", default=[])
    ap.add_argument("--fences", action="store_true", help="only step 3: which fence breaks ncu in the sandbox")
    ap.add_argument("--source", default=None, metavar="KERNEL", help="only step 4, for this kernel of the first --problem (default kda)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_kernel(args.child)
        return 0
    from activities.evaluation import ncu_metrics, ncu_path
    from kernels.evaluator.evaluate import request_for
    from kernels.problems.spec import get_problem
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ncu = ncu_path()
    record: dict = {"ncu": ncu, "version": None, "problems": {}}
    if ncu is None:
        print("no ncu found")
        (out / "ncu_metrics.json").write_text(json.dumps(record, indent=2))
        return 1
    banner = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    record["version"] = banner[-1] if banner else None  # "Version 2025.3.1.0 (build ...)"
    print(record["version"])
    if args.source:
        import gzip
        cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--kernel-name", args.source,
               "--launch-count", "1", "--set", "full", "--import-source", "yes", "--page", "source",
               "--print-source", "sass", "--csv", sys.executable, str(Path(__file__).resolve()), "--child",
               (args.problem or ["kda"])[0]]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
        path = out / f"ncu_{args.source.strip('_')}_sass.csv.gz"
        path.write_bytes(gzip.compress(proc.stdout.encode()))
        record["source"] = {"kernel": args.source, "exit": proc.returncode, "s": round(time.monotonic() - t0, 1),
                            "lines": proc.stdout.count("\n"), "stderr_tail": proc.stderr[-1500:],
                            "cmd": " ".join(cmd[:-4] + ["python", "bench/ncu_probe.py", "--child", cmd[-1]])}
        print(json.dumps(record["source"])[:1500], flush=True)
        (out / f"ncu_source_{args.source.strip('_')}.json").write_text(json.dumps(record, indent=2))
        return 0
    if args.fences:
        from kernels.settings import FENCE_SWITCHES
        problem = (args.problem or ["kda"])[0]
        spec = get_problem(problem)
        req = request_for(problem, "tuned", device="cuda", shapes=[spec.shapes("bench")[0]])
        record["fences"] = []
        for off in ([], ["netns"], ["landlock"], ["seccomp"]):
            saved = {FENCE_SWITCHES[n]: os.environ.get(FENCE_SWITCHES[n]) for n in off}
            os.environ.update({FENCE_SWITCHES[n]: "0" for n in off})
            t0 = time.monotonic()
            try:
                found = ncu_metrics(req, TUNED_KERNELS, timeout_s=120)
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
            row = {"fences_off": off, "captured": isinstance(found, dict), "result": found,
                   "s": round(time.monotonic() - t0, 1)}
            print(json.dumps(row)[:600], flush=True)
            record["fences"].append(row)
            (out / "ncu_fences.json").write_text(json.dumps(record, indent=2))
        return 0
    for problem in args.problem or ["mla_decode", "kda"]:
        spec = get_problem(problem)
        shape = spec.shapes("bench")[0]
        req = request_for(problem, "tuned", device="cuda", shapes=[shape])
        t0 = time.monotonic()
        metrics = ncu_metrics(req, TUNED_KERNELS, timeout_s=120)
        row = {"shape": shape, "through_sandbox": metrics, "through_sandbox_s": round(time.monotonic() - t0, 1)}
        print(problem, json.dumps(row)[:2000])
        cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--kernel-name",
               "regex:_mla_|_kda_", "--launch-skip", "0", "--launch-count", "4", "--page", "details"]
        for s in SECTIONS:
            cmd += ["--section", s]
        cmd += [sys.executable, str(Path(__file__).resolve()), "--child", problem]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
        (out / f"ncu_{problem}.txt").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr[-4000:])
        row["details_cmd"] = " ".join(cmd[:-4] + ["python", "bench/ncu_probe.py", "--child", problem])
        row["details_exit"] = proc.returncode
        row["details_s"] = round(time.monotonic() - t0, 1)
        record["problems"][problem] = row
        (out / "ncu_metrics.json").write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
