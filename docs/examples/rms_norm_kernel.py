"""A Triton candidate for rms_norm.py: one program per row, the whole row in registers."""
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _rms_norm(x_ptr, w_ptr, y_ptr, dim, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < dim
    x = tl.load(x_ptr + row * dim + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / dim + eps)
    tl.store(y_ptr + row * dim + cols, (x * inv * w).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        dim = x.shape[-1]
        BLOCK = triton.next_power_of_2(dim)
        _rms_norm[(x.numel() // dim,)](x, self.weight, y, dim, self.eps, BLOCK=BLOCK,
                                       num_warps=8 if BLOCK >= 2048 else 4)
        return y
