"""bench/kda_scan_forms.py, run as the script it is (`check`): its transition-form scan kernel (the
experiment the GPU times) computes KDA, its bf16 emulation of the two scan forms stays within the problem's
tolerance, and a scan that forgets the decay is caught."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # the Triton kernel on the CPU
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "kda_scan_forms.py"), "check", "--T", "150", "--H", "2",
                           "--K", "16"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["gates"]: r for r in out}


@pytest.mark.parametrize("gates", ["logsigmoid", "constant", "uniform"])  # the three gate cases
def test_transition_kernel_matches_the_recurrence(rows, gates):
    row = rows[gates]
    assert row["rel_err_triton_fp32"] < 1e-5  # fp32 throughout
    for form in ("rel_err_wy", "rel_err_transition"):  # bf16 operands
        assert 1e-4 < row[form] < 1e-2, (form, row)


def test_a_scan_that_forgets_the_decay_is_caught(rows):
    slow = rows["slow"]  # slow gates, so the state carries across chunks
    assert slow["rel_err_transition"] < 1e-2
    assert slow["rel_err_transition_without_decay"] > 5e-2
