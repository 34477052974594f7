"""bench/kda_scan_forms.py: its transition-form scan kernel (the experiment the GPU times) computes
KDA, and its bf16 emulation of the two scan forms stays within the problem's tolerance."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import kda_scan_forms as forms  # noqa: E402

from kernels.problems.kda.reference import make_inputs  # noqa: E402


@pytest.mark.parametrize("seed", [0, 1, 2])  # the three gate cases
def test_transition_kernel_matches_the_recurrence(seed):
    x = make_inputs({"B": 1, "T": 150, "H": 2, "K": 16, "V": 16}, seed, "cpu", torch.float32)
    q, k, v, beta = (x[n][0].double() for n in ("q", "k", "v", "beta"))
    g = x["g"][0].double()
    ref = forms.recurrence(q, k, v, g, beta, x["scale"])
    terms = forms.chunk_terms(q, k, v, g, beta, x["scale"])
    assert forms.rel(forms.scan_transition_triton(*terms).double(), ref) < 1e-5  # fp32 throughout
    for scan in (forms.scan_wy, forms.scan_transition):  # bf16 operands
        assert 1e-4 < forms.rel(scan(*terms), ref) < 1e-2



def test_a_scan_that_forgets_the_decay_is_caught():
    # slow gates, so the state carries across chunks (under the generator's gates it barely does)
    x = make_inputs({"B": 1, "T": 150, "H": 2, "K": 16, "V": 16}, 0, "cpu", torch.float32)
    q, k, v, beta = (x[n][0].double() for n in ("q", "k", "v", "beta"))
    g = -0.02 * torch.rand(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ref = forms.recurrence(q, k, v, g, beta, x["scale"])
    w, u0, qg, kd, M, gl, T = forms.chunk_terms(q, k, v, g, beta, x["scale"])
    assert forms.rel(forms.scan_transition(w, u0, qg, kd, M, gl, T), ref) < 1e-2
    assert forms.rel(forms.scan_transition(w, u0, qg, kd, M, torch.ones_like(gl), T), ref) > 5e-2
