"""The definition of MLA decode, in fp32, and the seeded input generator."""
import torch

from kernels.problems.mla_decode.problem import D_LATENT, D_QK, SCALE


def make_inputs(shape: dict[str, int], seed: int, device: str, dtype: torch.dtype) -> dict:
    """q [B, H, 576] and kv [B, S, 576], standard normal in `dtype`; scale pinned to 1/sqrt(192)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    b, h, s = shape["B"], shape["H"], shape["S"]
    q = torch.randn(b, h, D_QK, generator=gen, device=device, dtype=torch.float32).to(dtype)
    kv = torch.randn(b, s, D_QK, generator=gen, device=device, dtype=torch.float32).to(dtype)
    return {"q": q, "kv": kv, "scale": SCALE}


def output_spec(shape: dict[str, int], dtype: torch.dtype) -> tuple[tuple[int, ...], torch.dtype]:
    return (shape["B"], shape["H"], D_LATENT), dtype


def reference(q: torch.Tensor, kv: torch.Tensor, scale: float) -> torch.Tensor:
    """o = softmax(q . kv^T * scale) . kv[..., :512], everything in fp32. Returns fp32 [B, H, 512]."""
    q32, kv32 = q.float(), kv.float()
    scores = torch.einsum("bhd,bsd->bhs", q32, kv32) * scale  # K is the whole 576-wide row
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("bhs,bsd->bhd", probs, kv32[..., :D_LATENT])  # V is its latent part
