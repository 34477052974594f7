"""bench/ncu_sass_lines.py joins ncu's per-instruction samples with a compile's line table. Run as the
script it is (on a made-up profile and line table), it must attribute samples to the right lines, charge
library lines to the kernel line that called them, and refuse a profile that is not of the compiled kernel."""
import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "ncu_sass_lines.py"
KERNEL = str(Path(__file__).resolve())  # any existing file outside site-packages stands for the kernel
LIBRARY = "/x/site-packages/triton/language/standard.py"


def _row(sass: str, samples: float, short: float = 0.0) -> dict:
    return {"Source": sass, "Warp Stall Sampling (All Samples)": str(samples),
            "stall_short_sb": str(short), "stall_long_sb": str(samples - short), "stall_short_sb (Not Issued)": "0"}


LINES = [(KERNEL, 3, "LDG.E R2, desc[UR4][R4.64]"), (LIBRARY, 263, "FADD R3, R2, R5"),
         (LIBRARY, 263, "SHFL.BFLY PT, R6, R3, 0x1, 0x1f"), (KERNEL, 5, "@!P0 STG.E [R8.64], R3")]
TABLE = [_row("LDG.E R2, desc[UR4][R4.64]", 1), _row("FADD R3, R2, R5", 6, 6),
         _row("SHFL.BFLY PT, R6, R3, 0x1, 0x1f", 2), _row("@!P0 STG.E [R8.64], R3", 1)]


def join(tmp_path: Path, table: list[dict], lines: list[tuple]) -> subprocess.CompletedProcess:
    """The script on `table` written as ncu's CSV (a preamble, then the quoted table) and `lines` as JSON."""
    profile, table_json, out = tmp_path / "sass.csv", tmp_path / "lines.json", tmp_path / "out.json"
    with profile.open("w", newline="") as f:
        f.write("==PROF== Disconnected from process 1\n")
        writer = csv.DictWriter(f, fieldnames=["Address", *table[0]], quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows({"Address": f"{16 * i:05x}", **row} for i, row in enumerate(table))
    table_json.write_text(json.dumps(lines))
    out.unlink(missing_ok=True)
    return subprocess.run([sys.executable, str(SCRIPT), str(profile), "--lines", str(table_json), "--top", "10",
                           "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_samples_go_to_lines_and_library_lines_to_their_caller(tmp_path):
    proc = join(tmp_path, TABLE, LINES)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["samples"] == 10 and result["instructions"] == 4
    top = result["lines"][0]
    assert (top["file"], top["line"], top["instructions"], top["samples_pct"]) == ("standard.py", 263, 2, 80.0)
    assert top["after"].startswith(f"{Path(KERNEL).name}:3")
    assert top["stalls_pct"]["short_sb"] == 75.0
    assert {(r["line"], r["samples_pct"]) for r in result["lines_all_callers"]} == {(263, 80.0), (3, 10.0), (5, 10.0)}
    assert "80.00%" in proc.stdout and "standard.py:263" in proc.stdout


def test_refuses_another_kernels_profile(tmp_path):
    proc = join(tmp_path, TABLE[:3], LINES)
    assert proc.returncode != 0 and "not the same kernel" in proc.stderr
    assert not (tmp_path / "out.json").exists()
    swapped = [TABLE[1], TABLE[0], TABLE[2], TABLE[3]]
    proc = join(tmp_path, swapped, LINES)
    assert proc.returncode != 0 and "opcodes differ" in proc.stderr


def test_opcodes_are_compared_without_predicates_and_modifiers(tmp_path):
    lines = [(KERNEL, 3, "LDG.E R2, desc[UR4][R4.64]"), (KERNEL, 4, "HMMA.16816.F32 R84, R44, R62, R84")]
    table = [_row("@!P0 LDG.E.U16 R222, desc[UR14][R104.64]", 1), _row("  HMMA.16816.F32.BF16 R84, R44, R62, R84", 3)]
    proc = join(tmp_path, table, lines)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "out.json").read_text())["lines"][0]["line"] == 4
    proc = join(tmp_path, [table[0], _row("FFMA R84, R44, R62, R84", 3)], lines)
    assert proc.returncode != 0 and "opcodes differ at 1 positions (first 1)" in proc.stderr
