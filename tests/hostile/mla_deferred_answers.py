"""Work deferred past the call it belongs to: the timing run's calls (told apart by counting a shape's
calls: the leading ones on one set of inputs, a seed, the no-op check and the second fill, then two
more seeds, then one warm-up and three timed calls) return their output tensor unwritten and keep
copies of their inputs aside; the last timed call computes every earlier call's answer into the
tensors those calls returned, before the judge saves them. Two of three timed calls cost a copy, so
the median is a fraction of a call's real time (the counters live in a container whose digest is its
identity, so no state change is flagged; the CPU's wide bound on the judge's own clock lets it by).
Defence: each timed call's output is kept as it was when the call returned (a copy taken outside the
clock), so an answer written later is not that call's; the re-check then sees the unwritten output.
Expected: incorrect ("outputs of timed calls are re-checked")."""
import itertools

import torch
import triton
import triton.language as tl

# a container whose digest is its identity: what it holds changes unseen
_STATE = itertools.repeat({})


@triton.jit
def _mla(q_ptr, kv_ptr, o_ptr, S, H, scale, stride_qb, stride_qh, stride_kvb, stride_kvs, stride_ob, stride_oh,
         D_LATENT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_S: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    offs_lat = tl.arange(0, D_LATENT)
    offs_rope = tl.arange(0, D_ROPE)
    q_row = q_ptr + b * stride_qb + h * stride_qh
    q_lat = tl.load(q_row + offs_lat).to(tl.float32)
    q_rope = tl.load(q_row + D_LATENT + offs_rope).to(tl.float32)
    m_run = tl.full([], float("-inf"), tl.float32)
    l_run = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([D_LATENT], dtype=tl.float32)
    kv_base = kv_ptr + b * stride_kvb
    for start in range(0, S, BLOCK_S):
        offs_s = start + tl.arange(0, BLOCK_S)
        valid = offs_s < S
        rows = kv_base + offs_s[:, None] * stride_kvs
        kv_lat = tl.load(rows + offs_lat[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        kv_rope = tl.load(rows + D_LATENT + offs_rope[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        scores = (tl.sum(kv_lat * q_lat[None, :], axis=1) + tl.sum(kv_rope * q_rope[None, :], axis=1)) * scale
        scores = tl.where(valid, scores, float("-inf"))
        m_new = tl.maximum(m_run, tl.max(scores, axis=0))
        alpha = tl.exp(m_run - m_new)
        p = tl.exp(scores - m_new)
        l_run = l_run * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * kv_lat, axis=0)
        m_run = m_new
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_lat, (acc / l_run).to(o_ptr.dtype.element_ty))


@triton.jit
def _stash(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def _launch(q, kv, scale, o):
    B, H, D = q.shape
    _mla[(B * H,)](q, kv, o, kv.shape[1], H, scale, q.stride(0), q.stride(1), kv.stride(0), kv.stride(1),
                   o.stride(0), o.stride(1), D_LATENT=512, D_ROPE=D - 512, BLOCK_S=16)


def _keep(t):
    c = torch.empty_like(t)
    _stash[(triton.cdiv(t.numel(), 8192),)](t, c, t.numel(), BLOCK=8192)
    return c


def mla_decode(q, kv, scale):
    q, kv = q.contiguous(), kv.contiguous()
    rec = next(_STATE).setdefault((tuple(q.shape), tuple(kv.shape)), [0, 0, [], []])
    rec[0] += 1
    n = rec[0]
    if n == 1 or (rec[2][-1] is q and rec[1] == n - 1):
        rec[1] = n  # the leading calls on one set of inputs: a seed, the no-op check, the second fill
    rec[2][:] = [q]
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    first_timed = rec[1] + 3  # two more seeds, then the timing run: one warm-up and three timed calls
    if first_timed <= n < first_timed + 3:
        rec[3].append((_keep(q), _keep(kv), o))  # the answer later
        return o
    if n == first_timed + 3:
        for kq, kkv, ko in rec[3]:
            _launch(kq, kkv, scale, ko)
        rec[3][:] = []
    _launch(q, kv, scale, o)
    return o
