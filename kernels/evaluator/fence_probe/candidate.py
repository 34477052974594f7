"""The fence self-test's candidate: one Triton kernel, compiled and launched inside the sandbox."""
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _affine(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, 2.0 * x + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        _affine[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y
