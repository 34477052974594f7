"""Caching keyed on an input fingerprint (a few values read back with .item()): a repeated input is
answered from the cache, without launching anything. Defence: tensor values never reach the
launcher's Python (the policy refuses .item(); at run time the torch-op monitor records
aten._local_scalar_dense, however the value is read); past both, the no-op check (the same inputs
with the candidate's kernels disabled must give another output) catches every cache hit, and timed
calls never repeat values, so such a cache could not hit there anyway.
Expected: rejected ("attribute 'item'")."""
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

_CACHE = {}


def mla_decode(q, kv, scale):
    key = (tuple(q.shape), tuple(kv.shape), q[0, 0, 0].item(), q[-1, -1, 7].item(), kv[0, -1, 3].item())
    if key in _CACHE:
        return _CACHE[key].clone()
    o = _launch(q, kv, scale, torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype))
    _CACHE[key] = o.clone()
    return o
