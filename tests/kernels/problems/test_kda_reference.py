"""KDA's chunked fp64 reference, which the judge uses on long sequences on a GPU, against the
definition (the fp32 token loop) on short shapes: every gate case, lengths that are and are not a
whole number of chunks, several chunk sizes, and gates far steeper than the inputs' -5."""
import pytest
import torch

from kernels.labels import shape_label
from kernels.problems.kda import reference as kda

SHAPES = [{"B": 1, "T": 1, "H": 1, "K": 16, "V": 16}, {"B": 2, "T": 67, "H": 3, "K": 32, "V": 16},
          {"B": 1, "T": 96, "H": 2, "K": 64, "V": 32}]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("shape", SHAPES, ids=shape_label)
@pytest.mark.parametrize("seed", [0, 1, 2])  # seed % 3: the three gate cases
def test_chunked_matches_the_token_loop(shape, seed):
    x = kda.make_inputs(shape, seed, "cpu", torch.float16)
    loop = kda.reference_token_loop(**x)
    for chunk in (7, 32):
        chunked = kda.reference_chunked(**x, chunk=chunk)
        assert chunked.dtype == torch.float32 and chunked.shape == loop.shape
        assert _rel(chunked, loop) < 1e-6  # fp32 rounding of the loop; the tolerances are 1e-3 and up
        assert torch.allclose(chunked, loop, rtol=0, atol=1e-5 * loop.abs().max().item())


def test_chunked_keeps_steep_gates_finite_and_exact():
    """Gates of -60 per token underflow exp(G) across a chunk: the pairwise decays are formed from
    differences, so the answer stays the loop's (the state forgets almost everything each token)."""
    x = kda.make_inputs({"B": 1, "T": 50, "H": 2, "K": 16, "V": 16}, 2, "cpu", torch.float32)
    x["g"] = x["g"] * 12.0  # uniform(-60, 0)
    loop = kda.reference_token_loop(**x)
    chunked = kda.reference_chunked(**x, chunk=32)
    assert torch.isfinite(chunked).all()
    assert _rel(chunked, loop) < 1e-6


def test_a_wrong_recurrence_is_caught():
    """The comparison can fail: the chunked form with one token's update dropped is far off."""
    x = kda.make_inputs({"B": 1, "T": 40, "H": 1, "K": 16, "V": 16}, 0, "cpu", torch.float32)
    loop = kda.reference_token_loop(**x)
    x["beta"] = x["beta"].clone()
    x["beta"][:, 5] = 0
    assert _rel(kda.reference_chunked(**x), loop) > 1e-3


def test_the_judge_runs_the_token_loop_on_the_cpu():
    x = kda.make_inputs({"B": 1, "T": kda.CHUNKED_FROM_T, "H": 1, "K": 16, "V": 16}, 1, "cpu", torch.float16)
    assert torch.equal(kda.reference(**x), kda.reference_token_loop(**x))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the judge's chunked path runs on a GPU")
def test_the_judge_runs_the_chunked_form_on_a_gpu_and_it_matches():
    shape = {"B": 2, "T": kda.CHUNKED_FROM_T + 45, "H": 4, "K": 128, "V": 128}
    for seed in range(3):
        x = kda.make_inputs(shape, seed, "cuda", torch.bfloat16)
        judged, loop = kda.reference(**x), kda.reference_token_loop(**x)
        assert torch.equal(judged, kda.reference_chunked(**x))
        assert _rel(judged, loop) < 1e-5
