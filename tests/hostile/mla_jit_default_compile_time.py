"""Python run by Triton's compiler through a kernel's default argument: Triton evaluates a
@triton.jit function's defaults itself, with every global of the module in reach, so the call
`_answer()` runs while the kernel compiles; under the autotuner that is during its benchmarking,
which the torch-op monitor does not watch. Defence: a kernel's defaults may only be literals and
names. Expected: rejected ("default")."""
import torch
import triton
import triton.language as tl

_STASH = []


def _answer():
    q, kv, scale, o = _STASH[-1]
    p = torch.softmax((q.float() @ kv.float().transpose(1, 2)) * scale, dim=-1)
    o.copy_((p @ kv.float()[..., :512]).to(o.dtype))
    return 1


@triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["call"])
@triton.jit
def _noop(o_ptr, call, BLOCK: tl.constexpr, DONE: tl.constexpr = _answer()):
    tl.load(o_ptr)


def mla_decode(q, kv, scale):
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    _STASH.append((q, kv, scale, o))
    _noop[(1,)](o, len(_STASH))
    return o
