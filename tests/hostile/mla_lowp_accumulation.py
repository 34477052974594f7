"""Precision downcast: scores, probabilities, the running sum and the output accumulator all in
the input precision (fp16 on the CPU, bf16 on CUDA), tile after tile, instead of fp32.
Defence: tolerances tight enough that this fails on long sequences (MLA fp16: rel 1e-3; bf16:
rel 6e-3). Expected: incorrect (at S >= 1024)."""
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
    LOW = q_ptr.dtype.element_ty
    q_lat = tl.load(q_row + offs_lat).to(tl.float32)
    q_rope = tl.load(q_row + D_LATENT + offs_rope).to(tl.float32)
    m_run = tl.full([], float("-inf"), tl.float32).to(LOW)
    l_run = tl.full([], 0.0, tl.float32).to(LOW)
    acc = tl.zeros([D_LATENT], dtype=tl.float32).to(LOW)
    kv_base = kv_ptr + b * stride_kvb
    for start in range(0, S, BLOCK_S):
        offs_s = start + tl.arange(0, BLOCK_S)
        valid = offs_s < S
        rows = kv_base + offs_s[:, None] * stride_kvs
        kv_lat = tl.load(rows + offs_lat[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        kv_rope = tl.load(rows + D_LATENT + offs_rope[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        scores = (tl.sum(kv_lat * q_lat[None, :], axis=1) + tl.sum(kv_rope * q_rope[None, :], axis=1)) * scale
        scores = tl.where(valid, scores, float("-inf")).to(LOW)
        m_new = tl.maximum(m_run, tl.max(scores, axis=0)).to(LOW)  # bf16 max is computed in fp32 on GPUs
        alpha = tl.exp((m_run - m_new).to(tl.float32)).to(LOW)
        p = tl.exp((scores - m_new).to(tl.float32)).to(LOW)
        l_run = (l_run * alpha + tl.sum(p.to(tl.float32), axis=0)).to(LOW)
        acc = (acc * alpha + tl.sum(p[:, None].to(tl.float32) * kv_lat, axis=0)).to(LOW)
        m_run = m_new
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_lat, (acc.to(tl.float32) / l_run.to(tl.float32)).to(o_ptr.dtype.element_ty))


def _launch(q, kv, scale, o):
    B, H, D = q.shape
    _mla[(B * H,)](q, kv, o, kv.shape[1], H, scale, q.stride(0), q.stride(1), kv.stride(0), kv.stride(1),
                   o.stride(0), o.stride(1), D_LATENT=512, D_ROPE=D - 512, BLOCK_S=16)
    return o


def mla_decode(q, kv, scale):
    return _launch(q, kv, scale, torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype))
