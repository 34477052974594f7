"""Running torch inside the launch through an argument: passes an object whose data_ptr() (called
by Triton while binding arguments) computes the answer with torch. Defence: statically rejected (a
candidate's class may not have a data_ptr member); with the static policy skipped, kernel arguments
must be plain tensors, scalars or descriptors, and the launch is watched by the torch-op monitor.
Expected: rejected; run-time: rejected ("kernel argument was not a plain tensor")."""
import torch
import triton
import triton.language as tl


@triton.jit
def _noop(o_ptr):
    tl.load(o_ptr)


class Sneaky:
    def __init__(self, q, kv, scale, o):
        self.q, self.kv, self.scale, self.o = q, kv, scale, o
        self.dtype = o.dtype

    def data_ptr(self):
        p = torch.softmax((self.q.float() @ self.kv.float().transpose(1, 2)) * self.scale, dim=-1)
        self.o.copy_((p @ self.kv.float()[..., :512]).to(self.o.dtype))
        return self.o.data_ptr()


def mla_decode(q, kv, scale):
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    _noop[(1,)](Sneaky(q, kv, scale, o))
    return o
