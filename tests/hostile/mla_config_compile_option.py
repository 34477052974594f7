"""A compile option smuggled in as a launch keyword: triton.Config's dict (and a launch's keywords,
and a heuristic's names) reach Triton's compiler as options, where `ir_override` loads a file by path
in place of the kernel's own code (`extern_libs` links a library by path, `ptx_options` is ptxas's
command line); the static policy checks Config's keywords, not its dict's keys. The kernel that runs
is then whatever the file holds, under the candidate's kernel's name (the interpreter ignores the
option: on the CPU the honest kernel runs and would be ok).
Defence: the sandbox records every launch's keywords; a keyword that is neither one of the kernel's
parameters nor a launch setting (num_warps, num_stages, num_ctas, maxnreg, launch_pdl,
launch_cooperative_grid) is refused and the launch not made.
Expected: rejected ("compile options")."""
import torch
import triton
import triton.language as tl

# The kernel whose code runs in place of the one below: the Triton cache of an earlier evaluation (a
# torch.compile baseline's, a library's) holds IR files at paths a log can name; any IR file will do.
FOREIGN_IR = "/etc/hostname"


@triton.autotune(configs=[triton.Config({"BLOCK_S": 16, "ir_override": FOREIGN_IR}, num_warps=4)], key=["S"])
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


def mla_decode(q: torch.Tensor, kv: torch.Tensor, scale: float) -> torch.Tensor:
    B, H, D = q.shape
    S = kv.shape[1]
    q, kv = q.contiguous(), kv.contiguous()
    o = torch.empty((B, H, 512), device=q.device, dtype=q.dtype)
    _mla_decode_one_head[(B * H,)](
        q, kv, o, S, H, scale,
        q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), o.stride(0), o.stride(1),
        D_LATENT=512, D_ROPE=D - 512,
    )
    return o
