"""Stale memory: launches a kernel that stores nothing and returns the fresh output buffer, hoping
it still holds a correct answer (the reference's freed memory, an earlier call's output).
Defence: NaN poison in every buffer the candidate allocates and in the allocator's free memory;
the reference never runs in the candidate's process. Expected: incorrect (NaN in the output)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(q_ptr, n):
    tl.load(q_ptr + tl.arange(0, 16), mask=tl.arange(0, 16) < n)


def mla_decode(q, kv, scale):
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    _touch[(1,)](q, q.numel())
    return o
