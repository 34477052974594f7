"""KDA forward, plain and untuned: the token-by-token recurrence, one program per
(batch, head, block of value columns), the K x BV slice of the state kept in registers.

Value columns of the state evolve independently, so splitting V across programs is exact. Correct
for any shape; slow because the T steps run one after another with no tensor-core work."""
import torch
import triton
import triton.language as tl

# knobs a tuner may turn (kernels/problems/tunables.py); the launcher reads CONFIG
TUNABLES = {"BLOCK_V": (8, 16, 32, 64), "num_warps": (1, 2, 4, 8)}
CONFIG = {"BLOCK_V": 32, "num_warps": 4}


@triton.jit
def _kda_recurrent(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, o_ptr, T, H, K, V, scale,
    stride_qb, stride_qt, stride_qh, stride_vb, stride_vt, stride_vh, stride_bb, stride_bt,
    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V
    state = tl.zeros([BLOCK_K, BLOCK_V], dtype=tl.float32)
    qk_base = b * stride_qb + h * stride_qh  # q, k and g share one layout
    v_base = b * stride_vb + h * stride_vh  # v and o share one layout
    for t in range(0, T):
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


def kda(q, k, v, g, beta, scale):
    B, T, H, K = q.shape
    V = v.shape[-1]
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    o = torch.empty((B, T, H, V), device=v.device, dtype=v.dtype)
    BLOCK_V = min(triton.next_power_of_2(V), CONFIG["BLOCK_V"])
    grid = (B * H, triton.cdiv(V, BLOCK_V))
    _kda_recurrent[grid](
        q, k, v, g, beta, o, T, H, K, V, scale,
        q.stride(0), q.stride(1), q.stride(2), v.stride(0), v.stride(1), v.stride(2),
        beta.stride(0), beta.stride(1),
        BLOCK_K=triton.next_power_of_2(K), BLOCK_V=BLOCK_V, num_warps=CONFIG["num_warps"],
    )
    return o
