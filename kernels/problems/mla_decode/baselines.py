"""Baselines for MLA decode: PyTorch as a user would write it, and torch.compile of that."""
import torch

from kernels.problems.mla_decode.problem import D_LATENT
from kernels.problems.spec import LazyBaseline


def mla_decode_torch(q: torch.Tensor, kv: torch.Tensor, scale: float) -> torch.Tensor:
    """bf16 matmuls (fp32 accumulation inside cuBLAS), fp32 softmax, output in the input dtype."""
    scores = torch.matmul(q, kv.transpose(1, 2)).float() * scale
    probs = torch.softmax(scores, dim=-1).to(kv.dtype)
    return torch.matmul(probs, kv[..., :D_LATENT])


def baselines(device: str) -> dict:
    out = {"torch": mla_decode_torch}
    if device == "cuda":  # inductor on the CPU needs a C++ toolchain and says nothing about GPUs
        # built on first use: torch.compile's import costs seconds that a reused figure does not need
        out["torch_compile"] = LazyBaseline(lambda: torch.compile(mla_decode_torch, dynamic=False))
    return out
