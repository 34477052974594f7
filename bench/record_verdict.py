"""Wrap a verdict as `marathon eval --json` printed it into a result record (kernels/evaluator/result_record.py).

Run on the host that produced the verdict, right after it, so the host facts are that machine's:
  python3 marathon.py eval ... --json > v.json
  python3 bench/record_verdict.py v.json --measurement "rms_norm bf16 vs eager and compile" \
      --command "python3 marathon.py eval ..." --out bench/results/<hardware>/<name>.json
The commit is MARATHON_COMMIT when set (a copy of the tree without .git), else `git rev-parse HEAD`.
"""
import argparse
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

from kernels.evaluator.hostinfo import host_facts
from kernels.evaluator.result_record import Host, ResultRecord
from kernels.evaluator.verdict import Verdict
from kernels.settings import settings

BASELINE_LIBRARIES = ("flash-linear-attention", "fla-core")


def _commit() -> str | None:
    if settings().commit:
        return settings().commit
    out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or None if out.returncode == 0 else None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def build(text: str, measurement: str, command: str, figures: bool = False) -> ResultRecord:
    """`text` is a verdict as `marathon eval --json` printed it, or with `figures` a JSON object of
    figures from a measurement that is not one evaluation."""
    verdict = None if figures else Verdict.model_validate_json(text)
    facts = host_facts()
    host = Host(gpu=facts["gpu"] or "cpu", driver=facts["driver"], torch=facts["torch"],
                triton=facts["triton"], python=facts["python"],
                baseline_libraries={d: _version(d) for d in BASELINE_LIBRARIES if _version(d)})
    return ResultRecord(measurement=measurement, host=host, command=command, date=facts["date"],
                        commit=_commit(), verdict=verdict, figures=json.loads(text) if figures else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("verdict", help="a file holding `marathon eval --json` output (or figures: --figures)")
    ap.add_argument("--measurement", required=True, help="what was measured, in one line")
    ap.add_argument("--command", required=True, help="the command that produced the verdict")
    ap.add_argument("--out", required=True, help="the record file to write")
    ap.add_argument("--figures", action="store_true",
                    help="the input is a JSON object of figures (a bench script's output), not a verdict")
    args = ap.parse_args(argv)
    try:
        record = build(Path(args.verdict).read_text(), args.measurement, args.command, args.figures)
    except (OSError, ValueError) as e:
        print(f"record_verdict: {args.verdict}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(json.loads(record.model_dump_json()), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
