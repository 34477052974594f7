"""A Triton candidate for silu_scale.py: one pass over x, the weight indexed by column."""
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _silu_scale(x_ptr, w_ptr, y_ptr, n, dim, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs % dim, mask=mask, other=0.0).to(tl.float32)
    y = x / (1.0 + tl.exp(-x)) * w
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        BLOCK = 1024
        _silu_scale[(triton.cdiv(n, BLOCK),)](x, self.weight, y, n, x.shape[-1], BLOCK=BLOCK)
        return y
