"""The problem library: shapes, references, baselines and rooflines, without the evaluator."""
import math

import pytest
import torch

from kernels.evaluator.timing import compare
from kernels.problems.spec import PROBLEM_NAMES, ShapeError, get_problem, parse_shape, resolve_kernel
from kernels.evaluator.roofline import PROFILES, profile_for_gpu


@pytest.mark.parametrize("name", PROBLEM_NAMES)
def test_problem_has_every_part(name):
    spec = get_problem(name)
    for set_name in ("smoke", "bench", "sweep"):
        assert spec.shapes(set_name), set_name
        for shape in spec.shapes(set_name):
            assert spec.shape(shape) == shape  # every named shape is valid
    assert f"def {spec.entry_point}(" in spec.statement
    assert "starter" in spec.shipped_kernels
    label, source = resolve_kernel(spec, "starter")
    assert label == "starter" and f"def {spec.entry_point}(" in source
    assert set(spec.tolerances) >= {"bfloat16", "float16", "float32"}


def test_shape_parsing_and_validation():
    assert parse_shape("B=3,H=4,S=1000") == {"B": 3, "H": 4, "S": 1000}
    mla = get_problem("mla_decode")
    assert mla.shape({"S": 1000}) == {"B": 1, "H": 64, "S": 1000}  # defaults fill B and H
    with pytest.raises(ShapeError, match="no dimension"):
        mla.shape({"S": 10, "X": 1})
    with pytest.raises(ShapeError, match="at least 1"):
        mla.shape({"S": 0})
    with pytest.raises(ShapeError, match="needs T"):
        get_problem("kda").shape({"B": 1})
    with pytest.raises(ShapeError, match="NAME=VALUE"):
        parse_shape("B3")
    with pytest.raises(ShapeError, match="no shape set"):
        mla.shapes("huge")
    with pytest.raises(KeyError, match="unknown problem"):
        get_problem("gemm")


def test_rooflines_match_the_issue_figures():
    h200 = PROFILES["H200"]
    mla = get_problem("mla_decode")
    floor = mla.traffic({"B": 1, "H": 64, "S": 8192}, 2).floor_us(h200)
    assert 2.0 < floor < 2.4  # ~9.5 MB at 4.3 TB/s
    kda = get_problem("kda")
    floor = kda.traffic({"B": 1, "T": 8192, "H": 32, "K": 128, "V": 128}, 2).floor_us(h200)
    assert 85 < floor < 100  # ~0.09 ms I/O floor
    assert profile_for_gpu("NVIDIA H200") is h200
    assert profile_for_gpu("NVIDIA H100 80GB HBM3") is PROFILES["H100"]
    assert profile_for_gpu("NVIDIA A10G") is None


def test_mla_reference_agrees_with_the_baseline():
    from kernels.problems.mla_decode.baselines import mla_decode_torch
    from kernels.problems.mla_decode.reference import make_inputs, reference
    x = make_inputs({"B": 2, "H": 3, "S": 50}, 7, "cpu", torch.float32)
    ref = reference(**x)
    assert ref.shape == (2, 3, 512)
    torch.testing.assert_close(mla_decode_torch(**x), ref, rtol=1e-4, atol=1e-5)
    # the rope columns matter for the scores: dropping them changes the answer
    x2 = dict(x, kv=x["kv"].clone())
    x2["kv"][..., 512:] = 0
    assert not torch.allclose(reference(**x2), ref, atol=1e-3)


@pytest.mark.parametrize("seed", [0, 1, 2])  # the three gate cases
def test_kda_chunked_baseline_matches_the_recurrence(seed):
    from kernels.problems.kda.baselines import kda_chunked_torch
    from kernels.problems.kda.reference import make_inputs, reference
    shape = {"B": 2, "T": 150, "H": 2, "K": 16, "V": 8}  # two full chunks and a tail
    x = make_inputs(shape, seed, "cpu", torch.float32)
    assert (x["g"] <= 0).all() and (x["g"] >= -5).all()
    assert torch.allclose(x["q"].norm(dim=-1), torch.ones(2, 150, 2), atol=1e-5)
    ref = reference(**x)
    assert torch.isfinite(ref).all()
    torch.testing.assert_close(kda_chunked_torch(**x), ref, rtol=1e-4, atol=1e-5)


def test_kda_gate_cases_differ_by_seed():
    from kernels.problems.kda.reference import make_inputs
    shape = {"B": 1, "T": 8, "H": 1, "K": 16, "V": 16}
    g = [make_inputs(shape, s, "cpu", torch.float32)["g"] for s in range(3)]
    assert not torch.all(g[0] == -5.0)
    assert torch.all(g[1] == -5.0)
    assert g[2].min() >= -5.0 and g[2].max() <= 0.0 and not math.isclose(g[2].std().item(), 0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kda_reference_is_the_token_recurrence_as_written(seed):
    """The reference hoists exp(g), beta*k and the scale out of its loop; it must still be the
    statement's recurrence, written here one operation per symbol."""
    from kernels.problems.kda.reference import make_inputs, reference
    inp = make_inputs({"B": 2, "T": 37, "H": 3, "K": 16, "V": 8}, seed, "cpu", torch.float32)
    q, k, v, g, beta = (inp[n].double() for n in ("q", "k", "v", "g", "beta"))
    S = torch.zeros(2, 3, 16, 8, dtype=torch.float64)
    want = torch.empty(2, 37, 3, 8, dtype=torch.float64)
    for t in range(37):
        S = torch.diag_embed(g[:, t].exp()) @ S
        delta = v[:, t] - (S.transpose(-1, -2) @ k[:, t].unsqueeze(-1)).squeeze(-1)
        S = S + beta[:, t, :, None, None] * k[:, t].unsqueeze(-1) @ delta.unsqueeze(-2)
        want[:, t] = inp["scale"] * (S.transpose(-1, -2) @ q[:, t].unsqueeze(-1)).squeeze(-1)
    got = reference(**inp).double()
    assert compare(got, want)[0] < 1e-5
