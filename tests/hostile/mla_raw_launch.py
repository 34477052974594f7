"""An unrecorded launch: the compiled kernel a launch returns (also in the kernel's cache) has a raw
`run` that launches it directly, past the sandbox's record of launches and past its switch that
disables the candidate's kernels, so a replayed cached answer looks like fresh work. The own attribute
`self.run` is there to make `.run` look like a name the module defines.
Defence: attribute names come from an allowlist; a candidate's own attributes may not take names
that triton's or torch's objects have (run, cache, fn, ...). Expected: rejected ("attribute 'run'")."""
import torch
import triton
import triton.language as tl


class Runner:
    def __init__(self):
        self.run = None


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


_SEEN = {}


def mla_decode(q, kv, scale):
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    cached = _SEEN.get(tuple(q.shape))
    if cached is None:
        compiled = _copy[(1,)](o, o, 0, BLOCK=1024)
        _SEEN[tuple(q.shape)] = (compiled, o)
        return o
    compiled, answer = cached
    compiled.run(triton.cdiv(o.numel(), 1024), 1, 1, 0, compiled.function, None, None, None, None,
                 answer, o, o.numel())
    return o
