"""Python run by Triton's compiler through a decorator: triton.language.core.builtin marks a plain
Python function as part of the kernel language, so a kernel calls it while compiling (under the
autotuner: during its unwatched benchmarking, recompiled every call through a changing constexpr),
and it computes the answer with torch from tensors stashed by the launcher.
Defence: decorators come from an allowlist (jit, autotune, heuristics, lru_cache, dataclass,
no_grad). Expected: rejected ("decorator")."""
import torch
import triton
import triton.language as tl

_STASH = []


@tl.core.builtin
def _answer(step, _semantic=None):
    q, kv, scale, o = _STASH[-1]
    p = torch.softmax((q.float() @ kv.float().transpose(1, 2)) * scale, dim=-1)
    o.copy_((p @ kv.float()[..., :512]).to(o.dtype))
    return step


@triton.autotune(configs=[triton.Config({})], key=[])
@triton.jit
def _noop(o_ptr, STEP: tl.constexpr):
    _answer(STEP)
    tl.load(o_ptr)


def mla_decode(q, kv, scale):
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    _STASH.append((q, kv, scale, o))
    _noop[(1,)](o, STEP=len(_STASH))
    return o
