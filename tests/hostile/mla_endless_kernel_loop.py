"""Resource abuse: a kernel that never ends (the loop bound comes from memory and is huge).
Defence: the wall-clock limit; the process (and with it its GPU context) is killed, and the next
evaluation runs normally. Expected: timeout."""
import torch
import triton
import triton.language as tl


@triton.jit
def _spin(o_ptr, n_ptr):
    n = tl.load(n_ptr)
    acc = tl.zeros([16], dtype=tl.float32)
    i = 0
    while i < n:
        acc += 1.0
        i += 1
    tl.store(o_ptr + tl.arange(0, 16), acc.to(o_ptr.dtype.element_ty))


def mla_decode(q, kv, scale):
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    n = torch.full((1,), 2**62, dtype=torch.int64, device=q.device)
    _spin[(1,)](o, n)
    return o
