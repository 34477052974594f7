"""Work done once, then replayed, with the answer kept where a fingerprint of plain containers does not
look: an itertools.count numbers the calls and a deque holds the last output; after the correctness
checks it returns that output again behind a do-nothing launch. Defence: fresh inputs for every timed
call, their outputs re-checked afterwards; the state check reads iterators' positions and deques too.
(The static policy refuses collections; this is the run-time layer's case.)
Expected: incorrect ("timed call"), flagged for state that persists across calls."""
import collections
import itertools

import torch
import triton
import triton.language as tl


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


def _launch(q, kv, scale, o):
    B, H, D = q.shape
    _mla[(B * H,)](q, kv, o, kv.shape[1], H, scale, q.stride(0), q.stride(1), kv.stride(0), kv.stride(1),
                   o.stride(0), o.stride(1), D_LATENT=512, D_ROPE=D - 512, BLOCK_S=32)
    return o



@triton.jit
def _decoy(x_ptr):
    tl.load(x_ptr)


_CALLS = itertools.count()
_LAST = collections.deque(maxlen=1)


def mla_decode(q, kv, scale):
    if next(_CALLS) >= 5 and _LAST:
        _decoy[(1,)](q)
        return _LAST[0].clone()
    o = _launch(q, kv, scale, torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype))
    _LAST.append(o.clone())
    return o
