"""Partial write: runs the recurrence over the first half of the sequence only and leaves the second
half of the output unwritten. Defence: poisoned allocations, the whole tensor compared.
Expected: incorrect (NaN in the output)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _kda(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, o_ptr, T, T_RUN, H, K, V, scale,
         stride_qb, stride_qt, stride_qh, stride_vb, stride_vt, stride_vh, stride_bb, stride_bt,
         BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr):
    pid_bh = tl.program_id(0)
    b = pid_bh // H
    h = pid_bh % H
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V
    state = tl.zeros([BLOCK_K, BLOCK_V], dtype=tl.float32)
    qk_base = b * stride_qb + h * stride_qh
    v_base = b * stride_vb + h * stride_vh
    for t in range(0, T_RUN):
        qk_off = qk_base + t * stride_qt + offs_k
        k_t = tl.load(k_ptr + qk_off, mask=mask_k, other=0.0).to(tl.float32)
        q_t = tl.load(q_ptr + qk_off, mask=mask_k, other=0.0).to(tl.float32)
        g_t = tl.load(g_ptr + qk_off, mask=mask_k, other=0.0).to(tl.float32)
        v_off = v_base + t * stride_vt + offs_v
        v_t = tl.load(v_ptr + v_off, mask=mask_v, other=0.0).to(tl.float32)
        beta_t = tl.load(beta_ptr + b * stride_bb + t * stride_bt + h).to(tl.float32)
        state = state * tl.exp(g_t)[:, None]
        delta = v_t - tl.sum(state * k_t[:, None], axis=0)
        state = state + beta_t * k_t[:, None] * delta[None, :]
        o_t = scale * tl.sum(state * q_t[:, None], axis=0)
        tl.store(o_ptr + v_off, o_t.to(o_ptr.dtype.element_ty), mask=mask_v)


def _launch(q, k, v, g, beta, scale, o, t_run=None):
    B, T, H, K = q.shape
    V = v.shape[-1]
    _kda[(B * H,)](q, k, v, g, beta, o, T, T if t_run is None else t_run, H, K, V, scale,
                   q.stride(0), q.stride(1), q.stride(2), v.stride(0), v.stride(1), v.stride(2),
                   beta.stride(0), beta.stride(1),
                   BLOCK_K=triton.next_power_of_2(K), BLOCK_V=triton.next_power_of_2(V))
    return o


def kda(q, k, v, g, beta, scale):
    o = torch.empty(v.shape, device=v.device, dtype=v.dtype)
    return _launch(q, k, v, g, beta, scale, o, t_run=(q.shape[1] + 1) // 2)
