"""Source confusion on the compiled path: Triton's JIT keeps a kernel's source lines from its first
decorator on and compiles the text from the first line matching `^def name(`. A string spanning lines
in the decorator's arguments (`do_not_specialize=[...]`) holds a whole kernel of the same name, so on
a GPU the kernel compiled is the string's (here an honest decode kernel, for illustration; it could as
well be anything the policy refuses inside a kernel), while the function the policy checked, the one
written under the decorator, only writes zeros.
Defence: the policy refuses a string spanning lines in a Triton function's decorators; past it (the
policy skipped), the sandbox compares the source Triton's JIT takes for each of the candidate's kernels
(`JITFunction.src`, and on the CPU the JIT's cut that the interpreter also builds) with the function the
policy checked, right after the import, and the judge rejects a difference.
Expected: rejected ("a string spanning lines"; with the policy skipped, "not the source that was checked")."""
import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["""
def _decode_head(q_ptr, kv_ptr, o_ptr, S, H, scale, sqb, sqh, skb, sks, sob, soh,
                 D_LAT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_S: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    lat = tl.arange(0, D_LAT)
    rope = tl.arange(0, D_ROPE)
    q_lat = tl.load(q_ptr + b * sqb + h * sqh + lat).to(tl.float32)
    q_rope = tl.load(q_ptr + b * sqb + h * sqh + D_LAT + rope).to(tl.float32)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([D_LAT], dtype=tl.float32)
    for start in range(0, S, BLOCK_S):
        s = start + tl.arange(0, BLOCK_S)
        ok = s < S
        rows = kv_ptr + b * skb + s[:, None] * sks
        k_lat = tl.load(rows + lat[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
        k_rope = tl.load(rows + D_LAT + rope[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
        x = (tl.sum(k_lat * q_lat[None, :], axis=1) + tl.sum(k_rope * q_rope[None, :], axis=1)) * scale
        x = tl.where(ok, x, float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        a = tl.exp(m - m_new)
        p = tl.exp(x - m_new)
        l = l * a + tl.sum(p, axis=0)
        acc = acc * a + tl.sum(p[:, None] * k_lat, axis=0)
        m = m_new
    tl.store(o_ptr + b * sob + h * soh + lat, (acc / l).to(o_ptr.dtype.element_ty))
    _tail = '''"""])
def _decode_head(q_ptr, kv_ptr, o_ptr, S, H, scale, sqb, sqh, skb, sks, sob, soh,
                 D_LAT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_S: tl.constexpr):
    pid = tl.program_id(0)
    lat = tl.arange(0, D_LAT)
    tl.store(o_ptr + (pid // H) * sob + (pid % H) * soh + lat, tl.zeros([D_LAT], tl.float32).to(o_ptr.dtype.element_ty))  # '''
    pass


def mla_decode(q, kv, scale):
    B, H, D = q.shape
    S = kv.shape[1]
    q, kv = q.contiguous(), kv.contiguous()
    o = torch.empty((B, H, 512), device=q.device, dtype=q.dtype)
    _decode_head[(B * H,)](q, kv, o, S, H, scale, q.stride(0), q.stride(1), kv.stride(0), kv.stride(1),
                           o.stride(0), o.stride(1), D_LAT=512, D_ROPE=D - 512, BLOCK_S=16)
    return o
