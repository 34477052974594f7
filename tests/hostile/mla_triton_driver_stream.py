"""Reaching torch.cuda through Triton's driver: triton.runtime.driver.active.get_device_interface()
returns the torch.cuda module itself (and tl.target_info.driver is the same object), so a side
stream can be made without naming torch.cuda.Stream, and the driver's utils load raw binaries.
Defence: the triton API allowlist (triton.runtime and triton.language.target_info.driver are not on
it; every step of a triton.language name must stay inside triton.language). Expected: rejected
("triton.runtime")."""
import torch
import triton
import triton.language as tl


@triton.jit
def _zero(o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(o_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32).to(o_ptr.dtype.element_ty), mask=offs < n)


def mla_decode(q, kv, scale):
    cuda = triton.runtime.driver.active.get_device_interface()
    also = tl.target_info.driver.active.get_device_interface()
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    with cuda.stream(also.Stream()):
        _zero[(triton.cdiv(o.numel(), 1024),)](o, o.numel(), BLOCK=1024)
    return o
