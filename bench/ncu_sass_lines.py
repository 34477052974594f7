"""Where a kernel's warps wait, by line of Python source: ncu's per-SASS-instruction CSV (bench/ncu_probe.py
--source) joined with the line table of the same kernel compiled here for sm_90.

    python bench/ncu_sass_lines.py SASS.csv.gz (--kda-prep 128,128,4,0,1 | --lines LINES.json) \
        [--top 30] [--out FILE]
    (SASS.csv.gz: what `ncu_probe.py --source` wrote; kernels/problems/kda/NOTES.md, "Per instruction", cites one)

ncu lists the instructions of the launch it profiled in address order; triton's bundled ptxas gives the same
instructions when the kernel is compiled here as the launcher compiled it there (same triton, same
specialization: bench/sm90_resources.py), and nvdisasm -g tells the source line of each. The join is refused
unless both have the same number of instructions and the same opcode at every position. The variant string is
bench/sm90_resources.py's --kda-prep one, and must be the configuration that was profiled. --lines takes the
line table as JSON instead ([[file, line, instruction], ...] in address order), e.g. one kept from an earlier join.

Lines are the innermost ones of inlined @triton.jit helpers, so a helper's line (a load in `_tile`, the `a + b`
of triton's own sum) gathers every call of it; "after" names the kernel's last own line before each run of
library instructions, which is usually the call that issued them. Prints a table; --out writes JSON."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from ncu_sass_summary import num, rows

ROOT = Path(__file__).resolve().parent.parent

LINE = re.compile(r'\s*//## File "(.*?)", line (\d+)')
INSTR = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*$")


def opcode(sass: str) -> str:
    """The opcode of one SASS instruction, predicate and modifiers dropped (`@!P0 LDG.E.U16 R2, ...` -> LDG)."""
    words = sass.strip().split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def line_table(cubin: Path) -> list[tuple[str, int, str]]:
    """(source file, line, instruction) for every SASS instruction of the cubin, in address order."""
    import triton
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    text = subprocess.run([str(tool), "-g", "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    where, out = ("?", 0), []
    for ln in text.splitlines():
        m = LINE.match(ln)
        if m:
            where = (m.group(1), int(m.group(2)))
            continue
        m = INSTR.match(ln)
        if m:
            out.append((*where, m.group(2)))
    return out


def by_line(table: list[dict], lines: list[tuple[str, int, str]], top: int) -> dict:
    if len(table) != len(lines):
        raise SystemExit(f"{len(table)} instructions in the profile, {len(lines)} in the compile: not the same kernel")
    bad = [i for i, (row, (_, _, ins)) in enumerate(zip(table, lines)) if opcode(row["Source"]) != opcode(ins)]
    if bad:
        raise SystemExit(f"opcodes differ at {len(bad)} positions (first {bad[0]}): not the same kernel")
    reasons = [k for k in table[0] if k.startswith("stall_") and not k.endswith("(Not Issued)")]
    samples, count = Counter(), Counter()
    why: dict = defaultdict(Counter)
    own = None
    texts: dict[str, list[str]] = {}
    for row, (path, line, _) in zip(table, lines):
        if path not in texts:
            texts[path] = Path(path).read_text().splitlines() if Path(path).exists() else []
        if "site-packages" not in path and path != "?":  # the kernel's own source, not triton's library
            own = (path, line)
        key = (path, line, None if own == (path, line) else own)
        s = num(row["Warp Stall Sampling (All Samples)"])
        samples[key] += s
        count[key] += 1
        for r in reasons:
            why[key][r.removeprefix("stall_")] += num(row[r])
    total = sum(samples.values()) or 1.0

    def text(path: str, line: int) -> str:
        src = texts.get(path) or []
        return src[line - 1].strip() if 0 < line <= len(src) else ""

    hot = []
    for key, s in samples.most_common(top):
        path, line, after = key
        hot.append({"file": Path(path).name, "line": line, "source": text(path, line)[:100],
                    "samples_pct": round(100 * s / total, 2), "instructions": count[key],
                    "stalls_pct": {k: round(100 * v / s, 1) for k, v in why[key].most_common(3) if s},
                    **({"after": f"{Path(after[0]).name}:{after[1]} {text(*after)[:80]}"} if after else {})})
    # the same, every caller of a line together (triton's reductions and scans show up here as a few lines)
    merged = Counter()
    for (path, line, _), s in samples.items():
        merged[(path, line)] += s
    totals = [{"file": Path(path).name, "line": line, "source": text(path, line)[:100],
               "samples_pct": round(100 * s / total, 2)} for (path, line), s in merged.most_common(top)]
    return {"instructions": len(table), "samples": total, "lines": hot, "lines_all_callers": totals}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    table = ap.add_mutually_exclusive_group(required=True)
    table.add_argument("--kda-prep", metavar="VARIANT",
                       help="the profiled KDA preparation's configuration, as bench/sm90_resources.py --kda-prep takes it")
    table.add_argument("--lines", type=Path, metavar="LINES.json",
                       help="the line table as JSON, [[file, line, instruction], ...] in address order, not compiled here")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.lines:
        lines = [(str(f), int(n), str(ins)) for f, n, ins in json.loads(args.lines.read_text())]
        origin = {"lines": str(args.lines)}
    else:
        from sm90_resources import kda_prep_args, kda_prep_resources
        with tempfile.TemporaryDirectory() as tmp:
            cubin = Path(tmp) / "k.cubin"
            kda_prep_resources(*kda_prep_args(args.kda_prep), keep_cubin=cubin)
            lines = line_table(cubin)
        git = ["git", "-C", str(ROOT)]
        rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run([*git, "status", "--porcelain", "kernels"], capture_output=True,
                                    text=True).stdout.strip())
        origin = {"kda_prep": args.kda_prep, "source": f"{rev}{' with local changes to kernels/' if dirty else ''}"}
    result = {"csv": Path(args.csv).name, **origin, **by_line(rows(Path(args.csv)), lines, args.top)}
    print(f"{result['instructions']} instructions, {result['samples']:.0f} stall samples")
    for h in result["lines"]:
        print(f"{h['samples_pct']:5.2f}% {h['instructions']:5d} ins  {h['file']}:{h['line']}: {h['source'][:70]}"
              + (f"  (after {h['after'][:60]})" if "after" in h else ""))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
