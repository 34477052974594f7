"""The shipped tuned kernels, at their shipped CONFIG, compile for Hopper (sm_90) on this CPU host and fit
its limits. The Triton interpreter that runs the other CPU tests never lowers a kernel, so type errors
that only lowering sees (once, a bf16 maximum typed fp32 in a loop) and shared-memory budgets
beyond the GPU's would otherwise first show on a lent GPU. bench/sm90_resources.py compiles with
triton's bundled ptxas, specialized the way the launcher specializes at the headline shapes; it runs
in a subprocess because these tests' process has the interpreter switched on (conftest.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

from kernels.problems.kda.tuned import CONFIG as KDA
from kernels.problems.mla_decode.tuned import CONFIG as MLA

ROOT = Path(__file__).resolve().parents[3]
SMEM_LIMIT = 227 * 1024  # bytes of shared memory one Hopper thread block may use
TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
pytestmark = pytest.mark.skipif(not (TOOLS / "ptxas").exists() or not (TOOLS / "cuobjdump").exists(),
                                reason="triton's bundled ptxas / cuobjdump not found")


def compile_rows(tmp_path: Path, *args: str) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "sm90_resources.py"), *args, "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())["rows"]


def fits(row: dict) -> None:
    assert row["registers"] is not None and row["registers"] <= 255, row
    assert row["shared_bytes"] <= SMEM_LIMIT, row


def test_mla_stage1_in_both_regimes_and_the_tokens_form(tmp_path):
    variants = []
    for pre in ("SMALL_", ""):
        tokens = MLA[pre + "FORM"] == "tokens"
        stages = max(2, MLA[pre + "num_stages"]) if tokens else MLA[pre + "num_stages"]  # as the launcher does
        variants.append(f"{MLA[pre + 'BLOCK_H']},{MLA[pre + 'BLOCK_N']},{MLA[pre + 'num_warps']},{stages},{int(tokens)}")
    # the tokens form at 16 heads (the reason it exists: wgmma there), and a tile that must not fit
    small_regime, large_regime, tokens16, too_big = compile_rows(
        tmp_path, *variants, "16,64,4,2,1", "16,128,8,2,1")
    for row in (small_regime, large_regime):
        fits(row)
        assert row["stack_bytes"] == 0, row  # no variant of stage 1 spills (mla_decode_sm90_resources.json)
        assert row["hmma"] + row["hgmma"] > 0, row  # the products run on the tensor cores
    fits(tokens16)
    assert tokens16["hgmma"] > 0 and tokens16["hmma"] == 0, tokens16
    assert too_big["shared_bytes"] > SMEM_LIMIT, too_big  # the budget check has teeth (~310 KB)


def test_kda_preparation_and_scan(tmp_path):
    [prep] = compile_rows(tmp_path, "--kda-prep", f"{KDA['PREP_BK']},{KDA['PREP_BV']},{KDA['PREP_WARPS']},"
                          f"{KDA['PREP_MAXNREG']},{int(KDA['SCAN_WQ'])}")
    fits(prep)
    assert prep["SCAN_WQ"] == KDA["SCAN_WQ"] and prep["hmma"] > 0, prep
    [scan] = compile_rows(tmp_path, "--kda-scan",
                          f"{KDA['SCAN_BV']},{KDA['SCAN_WARPS']},{KDA['SCAN_STAGES']},{int(KDA['SCAN_WQ'])}")
    fits(scan)
    assert scan["SCAN_WQ"] == KDA["SCAN_WQ"] and scan["hgmma"] > 0, scan
