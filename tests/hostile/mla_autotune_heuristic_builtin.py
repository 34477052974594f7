"""Work hidden in the autotuner's benchmarking through a heuristic that leaves no frame: the ops the
monitor lets pass while Triton's benchmarking is innermost on the stack were told from the stack's
nearest Triton-or-candidate frame, so a heuristic built only of builtins and partials (next over a
chain of map/filter iterators of in-place tensor methods: no frame of the candidate's) made cuBLAS
compute the whole answer unseen, during the first benchmarked launch; a fresh autotuner per call
benchmarks on every call, a Triton kernel only copies the result out (so the no-op check sees the
output change), and later evaluations of the heuristic yield a plain 1.0. (On the CPU the interpreter
has no benchmarker: a GPU case.)
Defence: only an op that a benchmarking function makes itself is Triton's (the nearest frame outside
torch is do_bench's, the cache flush's, ...); whatever runs inside the launch it times, builtins and
partials included, belongs to the candidate's launcher further out, and is recorded.
Expected: rejected ("torch computed part of the answer"; on the GPU only)."""
import functools
import itertools
import math

import torch
import triton
import triton.language as tl


class _Steps:
    """Names of torch's in-place methods, as the candidate's own (the policy leaves computing
    methods to the run-time monitor)."""
    baddbmm_ = 0
    pow_ = 0
    div_ = 0


@triton.jit
def _copy(src_ptr, dst_ptr, n, DONE, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n).to(dst_ptr.dtype.element_ty), mask=offs < n)


def _once(method, *args):
    """An iterator that calls method(*args) when first drawn from and yields nothing."""
    return filter(callable, map(method, *[[a] for a in args]))


def mla_decode(q, kv, scale):
    B, H, D = q.shape
    S = kv.shape[1]
    qf, kvf = q.float(), kv.float()
    scores = torch.zeros((B, H, S), device=q.device, dtype=torch.float32)
    probs = torch.full((B, H, S), math.e, device=q.device, dtype=torch.float32)
    acc = torch.zeros((B, H, 512), device=q.device, dtype=torch.float32)
    den = torch.zeros((B, H, 1), device=q.device, dtype=torch.float32)
    ones = torch.ones((B, S, 1), device=q.device, dtype=torch.float32)
    steps = itertools.chain(
        _once(functools.partial(scores.baddbmm_, alpha=scale), qf, kvf.transpose(1, 2)),  # q . kv^T * scale
        _once(probs.pow_, scores),  # e ** scores (small scores: no max to subtract)
        _once(acc.baddbmm_, probs, kvf[:, :, :512]),
        _once(den.baddbmm_, probs, ones),
        _once(acc.div_, den),
        itertools.repeat(1.0),
    )
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512})], key=[])(
        triton.heuristics(values={"DONE": functools.partial(next, steps)})(_copy))
    o = torch.empty((B, H, 512), device=q.device, dtype=q.dtype)
    n = B * H * 512
    kernel[(triton.cdiv(n, 256),)](acc, o, n)
    return o
