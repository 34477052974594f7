"""bench/ncu_sass_lines.py joins ncu's per-instruction samples with a compile's line table: it must
attribute samples to the right lines, charge library lines to the kernel line that called them, and
refuse a profile that is not of the compiled kernel."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from ncu_sass_lines import by_line, opcode  # noqa: E402

KERNEL = str(Path(__file__).resolve())  # any existing file outside site-packages stands for the kernel
LIBRARY = "/x/site-packages/triton/language/standard.py"


def _row(sass: str, samples: float, short: float = 0.0) -> dict:
    return {"Source": sass, "Warp Stall Sampling (All Samples)": str(samples),
            "stall_short_sb": str(short), "stall_long_sb": str(samples - short), "stall_short_sb (Not Issued)": "0"}


LINES = [(KERNEL, 3, "LDG.E R2, desc[UR4][R4.64]"), (LIBRARY, 263, "FADD R3, R2, R5"),
         (LIBRARY, 263, "SHFL.BFLY PT, R6, R3, 0x1, 0x1f"), (KERNEL, 5, "@!P0 STG.E [R8.64], R3")]
TABLE = [_row("LDG.E R2, desc[UR4][R4.64]", 1), _row("FADD R3, R2, R5", 6, 6),
         _row("SHFL.BFLY PT, R6, R3, 0x1, 0x1f", 2), _row("@!P0 STG.E [R8.64], R3", 1)]


def test_samples_go_to_lines_and_library_lines_to_their_caller():
    result = by_line(TABLE, LINES, top=10)
    assert result["samples"] == 10 and result["instructions"] == 4
    top = result["lines"][0]
    assert (top["file"], top["line"], top["instructions"], top["samples_pct"]) == ("standard.py", 263, 2, 80.0)
    assert top["after"].startswith(f"{Path(KERNEL).name}:3")
    assert top["stalls_pct"]["short_sb"] == 75.0
    assert {(r["line"], r["samples_pct"]) for r in result["lines_all_callers"]} == {(263, 80.0), (3, 10.0), (5, 10.0)}


def test_refuses_another_kernels_profile():
    with pytest.raises(SystemExit, match="not the same kernel"):
        by_line(TABLE[:3], LINES, top=10)
    swapped = [TABLE[1], TABLE[0], TABLE[2], TABLE[3]]
    with pytest.raises(SystemExit, match="opcodes differ"):
        by_line(swapped, LINES, top=10)


def test_opcode_drops_predicates_and_modifiers():
    assert opcode("@!P0 LDG.E.U16 R222, desc[UR14][R104.64]") == "LDG"
    assert opcode("  HMMA.16816.F32.BF16 R84, R44, R62, R84") == "HMMA"
