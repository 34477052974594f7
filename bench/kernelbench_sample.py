"""A seeded sample of KernelBench's level1 and level2 files, untouched, through `marathon problem --device cpu`.

A file passes when `marathon problem FILE --device cpu --json` exits 0 and every reference call is `ok`
(at the sizes the file chose for a CPU, its reference run once at each).

    python bench/kernelbench_sample.py --root KERNELBENCH_CHECKOUT [--count 30] [--seed N] [--out FILE]

--root is a KernelBench checkout (the folder holding KernelBench/level1, or level1 itself, or any
folder above them). Each file runs in its own `marathon` process with a timeout; the files are read,
never copied. Writes one ResultRecord (kernels/evaluator/result_record.py) with each file's status."""
from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEVELS = ("level1", "level2")
MAX_COUNT = 1000
MAX_TIMEOUT_S = 3600


def level_folders(root: Path) -> dict[str, Path]:
    """level1 and level2 under --root (KernelBench's layout: KernelBench/levelN)."""
    found = {}
    for level in LEVELS:
        for candidate in (root / level, root / "KernelBench" / level):
            if candidate.is_dir():
                found[level] = candidate
                break
    return found


def sample(folders: dict[str, Path], count: int, seed: int) -> list[Path]:
    files = sorted(p for folder in folders.values() for p in folder.glob("*.py") if p.name != "__init__.py")
    return sorted(random.Random(seed).sample(files, min(count, len(files))))


def check(path: Path, timeout_s: float) -> dict:
    """One file through `marathon problem`, as a user would run it."""
    cmd = [sys.executable, "-m", "marathon", "problem", str(path), "--device", "cpu", "--json"]
    t0 = time.monotonic()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "exit": None, "wall_s": round(time.monotonic() - t0, 2),
                "error": f"no answer within {timeout_s:g} s"}
    wall = round(time.monotonic() - t0, 2)
    stderr = [line for line in out.stderr.splitlines() if line.strip()]
    row: dict = {"exit": out.returncode, "wall_s": wall}
    try:
        report = json.loads(out.stdout) if out.stdout.strip() else None
    except ValueError:
        report = None
    if report is not None:
        calls = report.get("reference") or []
        row.update(chosen=report.get("chosen"), dimensions=report.get("dimensions"),
                   constants=report.get("constants"),
                   reference=[{k: c.get(k) for k in ("shape", "status", "output_shape", "seconds", "error")}
                              for c in calls])
        every_ok = bool(calls) and all(c.get("status") == "ok" for c in calls)
    else:
        every_ok = False
    row["status"] = "ok" if out.returncode == 0 and every_ok else "failed"
    if row["status"] != "ok":
        row["error"] = stderr[-1][:500] if stderr else f"exit {out.returncode}, no message"
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True, help="a KernelBench checkout (holding KernelBench/level1, level2)")
    ap.add_argument("--count", type=int, default=30, help="files to sample from level1 and level2 together")
    ap.add_argument("--seed", type=int, default=None, help="the sample's seed (default: today's date, YYYYMMDD)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for one file's `marathon problem`")
    ap.add_argument("--revision", default=None,
                    help="the KernelBench commit the files come from (default: --root's git HEAD, if it is a checkout)")
    ap.add_argument("--out", type=Path, default=None,
                    help="the record to write (default: .marathon/bench/kernelbench_sample.json)")
    args = ap.parse_args(argv)
    if not 1 <= args.count <= MAX_COUNT or not 0 < args.timeout <= MAX_TIMEOUT_S:
        print(f"kernelbench_sample.py: --count must be 1..{MAX_COUNT} and --timeout in (0, {MAX_TIMEOUT_S}] s",
              file=sys.stderr)
        return 2
    folders = level_folders(args.root)
    if set(folders) != set(LEVELS):
        print(f"kernelbench_sample.py: {args.root} holds no KernelBench/level1 and level2", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else int(time.strftime("%Y%m%d", time.gmtime()))
    out_path = args.out or Path(".marathon") / "bench" / "kernelbench_sample.json"

    import torch
    import triton

    from kernels.evaluator.result_record import Host, ResultRecord

    def git(*a: str, cwd: Path) -> str | None:
        r = subprocess.run(["git", *a], cwd=cwd, capture_output=True, text=True)
        return r.stdout.strip() or None if r.returncode == 0 else None

    # the code that runs is the commit checked out when the sweep starts (read now, not at the end)
    commit = git("rev-parse", "HEAD", cwd=ROOT)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    files: dict[str, dict] = {}
    for path in sample(folders, args.count, seed):
        key = f"{path.parent.name}/{path.name}"
        files[key] = row = check(path, args.timeout)
        print(f"{key}: {row['status']} ({row['wall_s']:.1f} s)" + (f": {row['error']}" if "error" in row else ""),
              flush=True)
    passed = sum(r["status"] == "ok" for r in files.values())
    print(f"{passed}/{len(files)} files: exit 0 and every reference call ok")

    kb_commit = args.revision or git("rev-parse", "HEAD", cwd=args.root)
    command = (f"python bench/kernelbench_sample.py --root KERNELBENCH --count {args.count} --seed {seed}"
               + (f" --timeout {args.timeout:g}" if args.timeout != 600.0 else ""))
    record = ResultRecord(
        measurement="KernelBench level1+level2 files, a seeded sample, untouched: `marathon problem FILE --device cpu "
                    "--json` exits 0 with every reference call ok",
        host=Host(gpu="cpu", driver=None, torch=torch.__version__, triton=triton.__version__,
                  python=platform.python_version(), baseline_libraries={}),
        command=command, date=started, commit=commit,
        figures={"kernelbench_commit": kb_commit, "seed": seed, "files_sampled": len(files), "passed": passed,
                 "failed": len(files) - passed, "timeout_s": args.timeout, "files": files})
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(record.model_dump_json(indent=1) + "\n")
    print(f"wrote {out_path}")
    return 0 if passed == len(files) else 1


if __name__ == "__main__":
    raise SystemExit(main())
