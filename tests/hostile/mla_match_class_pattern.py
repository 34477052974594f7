"""Escape through a match statement: a class pattern `case object(__globals__=...)` reads a function's
globals with no attribute in the source; from its builtins the candidate imports sys, finds the
sandbox's torch-op monitor and pauses it, computes MLA with torch.einsum/softmax, and copies the
result out with a trivial Triton kernel (so that a kernel of its own "launched").
Defence: the syntax allowlist has no match statement (nor getattr, setattr, einsum or softmax).
Expected: rejected ("'match' statement")."""
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def _builtins():
    match _builtins:
        case object(__globals__={"__builtins__": found}):
            return found
    return None


def mla_decode(q, kv, scale):
    b = _builtins()
    watch = b["__import__"]("sys").modules["kernels.evaluator.candidate_process"].WATCH
    b["setattr"](watch, "paused", watch.paused + 1)
    try:
        scores = torch.einsum("bhd,bsd->bhs", q.float(), kv.float()) * scale
        answer = torch.einsum("bhs,bsd->bhd", torch.softmax(scores, -1), kv.float()[..., :512]).to(q.dtype)
    finally:
        b["setattr"](watch, "paused", watch.paused - 1)
    o = torch.empty_like(answer)
    _copy[(triton.cdiv(o.numel(), 1024),)](answer, o, o.numel(), BLOCK=1024)
    return o
