"""Where a kernel's warps wait, from ncu's per-SASS-instruction CSV (bench/ncu_probe.py --source).

    python bench/ncu_sass_summary.py SASS.csv.gz [--top 25] [--out FILE]
    (SASS.csv.gz: what `ncu_probe.py --source` wrote; kernels/problems/kda/NOTES.md, "Per instruction", cites one)

Sums the warp stall samples by reason and by opcode, and lists the instructions with the most samples
(with the neighbouring instructions, to see what they wait for). Prints a table; --out writes JSON."""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import sys
from collections import Counter
from pathlib import Path


def rows(path: Path) -> list[dict]:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def num(v: str | None) -> float:
    try:
        return float((v or "0").replace(",", ""))
    except ValueError:
        return 0.0


def summarize(table: list[dict], top: int) -> dict:
    reasons = [k for k in table[0] if k.startswith("stall_") and not k.endswith("(Not Issued)")]
    by_reason = Counter({r.removeprefix("stall_"): sum(num(row[r]) for row in table) for r in reasons})
    samples = [num(row["Warp Stall Sampling (All Samples)"]) for row in table]
    total = sum(samples) or 1.0
    by_opcode: Counter = Counter()
    for row, s in zip(table, samples):
        by_opcode[row["Source"].split()[0].split(".")[0] if row["Source"].split() else "?"] += s
    hot = sorted(range(len(table)), key=lambda i: -samples[i])[:top]
    hottest = []
    for i in hot:
        row = table[i]
        main = max(reasons, key=lambda r: num(row[r]))
        hottest.append({"index": i, "address": row["Address"], "sass": row["Source"].strip(),
                        "samples_pct": round(100 * samples[i] / total, 2), "main_stall": main.removeprefix("stall_"),
                        "before": [table[j]["Source"].strip() for j in range(max(0, i - 2), i)]})
    return {"instructions": len(table), "samples": total,
            "by_reason_pct": {k: round(100 * v / total, 1) for k, v in by_reason.most_common() if v},
            "by_opcode_pct": {k: round(100 * v / total, 1) for k, v in by_opcode.most_common(15) if v},
            "hottest": hottest}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    s = summarize(rows(Path(args.csv)), args.top)
    print(f"{s['instructions']} instructions, {s['samples']:.0f} stall samples")
    print("by reason (%):", json.dumps(s["by_reason_pct"]))
    print("by opcode (%):", json.dumps(s["by_opcode_pct"]))
    for h in s["hottest"]:
        print(f"{h['samples_pct']:5.2f}%  {h['main_stall']:<14} {h['sass'][:70]:<70}  after: {' | '.join(b[:40] for b in h['before'])}")
    if args.out:
        Path(args.out).write_text(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
