"""A CUDA illegal address: the kernel stores far outside any allocation. Defence: the fault ends the
candidate's process only (its CUDA context dies with it); the verdict is typed and the next
evaluation on the same GPU runs normally. Expected: crashed."""
import torch
import triton
import triton.language as tl


@triton.jit
def _wild(o_ptr):
    offs = tl.arange(0, 16)
    tl.store(o_ptr + (1 << 40) + offs, tl.zeros([16], dtype=tl.float32).to(o_ptr.dtype.element_ty))


def mla_decode(q, kv, scale):
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    _wild[(1,)](o)
    return o
