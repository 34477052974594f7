"""A Triton candidate for a row softmax in the KernelBench format (level1's 23_Softmax: softmax over
dim 1 of a (batch_size, dim) tensor), written for rows far longer than a program can hold.

One program per row, two passes over it: the first keeps, per lane, the running max and the sum of
exponentials scaled to it (online softmax); the lanes are then folded into the row's max M and sum S;
the second pass writes exp(x - M) / S."""
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _softmax_rows(x_ptr, y_ptr, dim, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * dim
    y_row = y_ptr + row * dim
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)  # running max per lane
    s = tl.zeros([BLOCK], tl.float32)  # sum of exp(x - m) per lane
    for start in range(0, dim, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < dim, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # a lane that has seen only padding keeps m = -inf; shift it by 0 so that no inf - inf appears
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
    row_max = tl.max(m, axis=0)
    row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)
    inv = 1.0 / row_sum
    for start in range(0, dim, BLOCK):
        mask = start + cols < dim
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + start + cols, (tl.exp(x - row_max) * inv).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, dim = x.shape
        block = min(4096, triton.next_power_of_2(dim))
        _softmax_rows[(rows,)](x, y, dim, BLOCK=block, num_warps=8 if block >= 2048 else 4)
        return y
