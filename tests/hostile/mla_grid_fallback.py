"""Falling back to torch where the monitor used to look away: the answer is computed with torch
inside the grid function, which Triton calls inside its launch. Defence: statically rejected
(torch.softmax); with the static policy skipped, the launch is not exempt from the torch-op monitor
(only the autotuner's benchmarking is). Expected: rejected; run-time: rejected ("torch computed")."""
import torch
import triton
import triton.language as tl


@triton.jit
def _noop(o_ptr):
    tl.load(o_ptr)


def mla_decode(q, kv, scale):
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)

    def grid(meta):
        p = torch.softmax((q.float() @ kv.float().transpose(1, 2)) * scale, dim=-1)
        o.copy_((p @ kv.float()[..., :512]).to(o.dtype))
        return (1,)

    _noop[grid](o)
    return o
