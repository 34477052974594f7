"""KDA forward, chunked: a chunk-parallel preparation kernel, then a sequential scan across chunks.

The math is `kda_chunked_torch` in baselines.py. Per batch and head, tokens are cut into chunks of
BT = 64; with G the within-chunk inclusive cumulative gate (G <= 0, decreasing down the chunk) and
S0 the state entering the chunk:

    A[i,j] = sum_c k_ic k_jc exp(G_ic - G_jc)   (j < i)      M[i,j] = same with q_i   (j <= i)
    L = I + diag(beta) A,   Tinv = L^-1                         (unit lower triangular)
    W = Tinv diag(beta) (exp(G) * K),   U0 = Tinv diag(beta) V  (the WY / UT form)
    U = U0 - W S0                       (the pseudo-values: delta-rule corrected values)
    O = scale (exp(G) * Q) S0 + scale M U
    S1 = exp(G_last) * S0 + (exp(G_last - G) * K)^T U

Everything that does not involve S0 (A, M, Tinv, W, U0, the gated Q and K) is independent across
chunks: `_kda_prep` computes it with one program per (chunk, batch*head). What remains is a few
tensor-core products per chunk, which `_kda_scan` runs chunk after chunk with the K x BV state
slice in fp32 registers, writing O as it goes (one program per (batch*head, block of V columns):
value columns of the state evolve independently, so splitting V is exact).

Numerics: exp(G_i - G_j) cannot be split as exp(G_i) * exp(-G_j): over a chunk G falls as low as
64 * (-5) = -320 and exp(320) overflows fp32. The preparation works on four 16-token sub-chunks and
re-centres each at a gate Gm half way down it: the gate before the sub-chunk plus half the
sub-chunk's total (G runs from the one to the other, so |G - Gm| <= 8 * 5 = 40). It
forms E = exp(G - Gm) (E <= e^40, far inside fp32 and bf16 range) and, for a pair of sub-chunks
I > J, multiplies in the per-channel factor exp(Gm_I - Gm_J) <= 1. Every factor then stays finite for
any per-token gate g >= -11; products that underflow to zero are ones whose true value is below
~1e-38 anyway.
The problem's gates are >= -5.

Dtypes: on the GPU the intermediates and tensor-core operands are bf16 with fp32 accumulation; the
state, gates and exponentials are fp32; the inverses of the solve's 16 x 16 diagonal blocks are
formed from fp32 inputs by tf32 tensor-core products and rounded to bf16 for the block
substitution around them, which takes bf16 operands. For
fp16/fp32 inputs (the CPU interpreter, where tl.dot on bf16 is not usable) everything runs in fp32."""
import torch
import triton
import triton.language as tl

# knobs a tuner may turn (kernels/problems/tunables.py); the launcher reads CONFIG, which holds the
# fastest settings measured on an H200. The forms measured slower at every setting tried (A and M by
# column blocks, the explicit L^-1 solve, stacked tiles, ieee or tf32x3 inverses, other re-centring
# gates, the chunk's total gate carried instead of loaded) left the code: kernels/problems/kda/NOTES.md
# has each figure. What stays is what another GPU may well want otherwise: tile sizes, warps, register
# cap, launch order, the scan's settings, PDL, and the scan's W/Qg layout (within the measured spread).
# Judged end to end: 592.4 us against FLA's 996.5 us at B=1,T=8192, 1.68x, and 1.69x and 1.68x at the
# other two headline shapes (bench/results/h200/kda_tuned_bench.json); correct on the sweep shape set
# (bench/results/h200/kda_tuned_sweep.json).
TUNABLES = {
    "PREP_BK": (32, 64, 128),  # channels per step of the preparation (128: one step, fastest measured)
    "PREP_BV": (32, 64, 128),  # value columns per step of its U0 = L^-1 (beta V)
    "PREP_WARPS": (4, 8),
    # a register cap for the preparation (0: the compiler's choice, 255 at 4 warps, which allows 2
    # programs per SM)
    "PREP_MAXNREG": (0, 128, 168),
    # the preparation's launch order: a head's chunks side by side ("chunks") or a chunk's heads
    # ("heads", whose concurrent programs read the same tokens' rows of q, k, v and g)
    "PREP_ORDER": ("chunks", "heads"),
    # the scan: V columns of the state per program, warps, and how many chunks ahead its loads run
    # (1, no pipelining, faulted on the H200 with 4 warps: left out); one set for few batch*heads
    # (V split finely, to spread over the SMs) and one for many
    "MANY_HEADS": (64, 128, 256),  # batch*heads from which the _MANY set applies
    "SCAN_BV": (16, 32, 64, 128),
    "SCAN_WARPS": (4, 8),
    "SCAN_STAGES": (2, 3, 4),
    "SCAN_BV_MANY": (16, 32, 64, 128),
    "SCAN_WARPS_MANY": (4, 8),
    "SCAN_STAGES_MANY": (2, 3, 4),
    # launch the scan as a programmatic dependent launch (Hopper): its programs are placed while the
    # preparation's last wave runs and wait in griddepcontrol.wait, hiding the launch gap between them
    # (no gain measured at B=1,T=8192 on the H200: kernels/problems/kda/NOTES.md)
    "SCAN_PDL": (False, True),
    # W, Qg and Kd interleaved chunk by chunk in one buffer, and the scan's W S and Qg S as one
    # [2 BT, BK] x [BK, BV] product (one tensor-core product and wait fewer per chunk)
    "SCAN_WQ": (False, True),
    # context parallelism where batch*heads are few (_segments): the most segments (0: never split),
    # the share of the SMs today's scan must fill to go without, the fewest chunks per segment
    "CP_SEGS": (0, 2, 4, 8, 16, 32),
    "CP_BELOW": (0.5, 0.75, 1.0, 2.0),
    "CP_MIN_CHUNKS": (1, 2, 4, 8, 16),
    # the segment scan (_kda_seg_scan): V columns per program, warps, pipeline stages
    "CP_BV": (32, 64, 128),
    "CP_WARPS": (4, 8),
    "CP_STAGES": (2, 3),
    # the segments' end states and transitions (_kda_seg_state): state columns per program, warps, stages
    "CP_TBV": (32, 64, 128),
    "CP_TWARPS": (4, 8),
    "CP_TSTAGES": (2, 3),
}
CONFIG = {"PREP_BK": 128, "PREP_BV": 128, "PREP_WARPS": 4, "PREP_MAXNREG": 0, "PREP_ORDER": "chunks",
          "MANY_HEADS": 128, "SCAN_BV": 32, "SCAN_WARPS": 4, "SCAN_STAGES": 3,
          "SCAN_BV_MANY": 64, "SCAN_WARPS_MANY": 8, "SCAN_STAGES_MANY": 3, "SCAN_PDL": False,
          "SCAN_WQ": True, "CP_SEGS": 16, "CP_BELOW": 0.75, "CP_MIN_CHUNKS": 4, "CP_BV": 64, "CP_WARPS": 8,
          "CP_STAGES": 3, "CP_TBV": 64, "CP_TWARPS": 4, "CP_TSTAGES": 2}

CHUNK = 64  # tokens per chunk: the preparation is written out for four sub-chunks
SUB = 16  # sub-chunk: the re-centring window and the smallest tile tl.dot accepts


@triton.jit
def _tile(ptr, base, row0, nrows, stride_r, cols, ncols, ROWS: tl.constexpr):
    """Rows row0 .. row0+ROWS of a row-major [nrows, stride_r] view, zero past nrows and ncols."""
    rows = row0 + tl.arange(0, ROWS)
    mask = (rows < nrows)[:, None] & (cols < ncols)[None, :]
    return tl.load(ptr + base + rows[:, None].to(tl.int64) * stride_r + cols[None, :], mask=mask, other=0.0)


@triton.jit
def _put(ptr, base, row0, stride_r, cols, tile, ROWS: tl.constexpr):
    """Store a tile at rows row0 .. row0+ROWS of a padded scratch buffer (no masks needed)."""
    rows = row0 + tl.arange(0, ROWS)
    tl.store(ptr + base + rows[:, None].to(tl.int64) * stride_r + cols[None, :], tile.to(ptr.dtype.element_ty))


@triton.jit
def _sub_chunk(q_ptr, k_ptr, g_ptr, qk_base, row0, T, stride_qt, offs_c, K, carry, glast, beta, scale,
               w_ptr, qg_ptr, kd_ptr, s_base, s_row0, DT: tl.constexpr, BK: tl.constexpr, SUB: tl.constexpr,
               tot):
    """One 16-token sub-chunk, for the channels offs_c: its cumulative gates (carry = G just before
    it), re-centred at Gm, the carry plus half the sub-chunk's total gate `tot` (which bounds
    |G - Gm| without extracting a row). Stores what the scan needs from it (the gated queries
    scale*q*exp(G) and the decayed keys k*exp(G_last - G)) and, into the W buffer as scratch,
    B = beta*k*exp(G), the right-hand side of the solve. Returns the re-centred operands of the
    intra-chunk products
      kE = k exp(G - Gm),  qE = q exp(G - Gm),  X = k exp(Gm - G)     (in the dot dtype)
    with Gm and the carry for the next sub-chunk."""
    g = _tile(g_ptr, qk_base, row0, T, stride_qt, offs_c, K, SUB).to(tl.float32)  # 0 past T: G stays flat
    G = tl.cumsum(g, axis=0) + carry[None, :]
    Gm = carry + 0.5 * tot  # G runs from carry + g_0 down to carry + tot
    D = G - Gm[None, :]  # |D| <= 8 * max|g|
    E = tl.exp(D)
    k = _tile(k_ptr, qk_base, row0, T, stride_qt, offs_c, K, SUB).to(tl.float32)
    q = _tile(q_ptr, qk_base, row0, T, stride_qt, offs_c, K, SUB).to(tl.float32)
    kE = k * E
    qE = q * E
    X = k * tl.exp(-D)
    eGm = tl.exp(Gm)  # <= 1: exp(G) = E * exp(Gm), without ever forming exp(-G)
    _put(qg_ptr, s_base, s_row0, BK, offs_c, qE * (scale * eGm)[None, :], SUB)
    _put(kd_ptr, s_base, s_row0, BK, offs_c, X * tl.exp(glast - Gm)[None, :], SUB)
    _put(w_ptr, s_base, s_row0, BK, offs_c, kE * (beta[:, None] * eGm[None, :]), SUB)
    return kE.to(DT), qE.to(DT), X.to(DT), Gm, carry + tot


@triton.jit
def _diag(kE, qE, X, a, m):
    """Accumulate A and M inside one sub-chunk: both sides share its re-centring gate Gm.
    The upper triangle (dropped later) can be huge but stays finite for gates >= -5.5."""
    xt = tl.trans(X)
    return tl.dot(kE, xt, acc=a), tl.dot(qE, xt, acc=m)


@triton.jit
def _pair(kE_i, qE_i, X_j, Gm_i, Gm_j, a, m):
    """Accumulate A and M between a later sub-chunk I (rows) and an earlier one J (columns):
    exp(G_i - G_j) = exp(G_i - Gm_I) * exp(Gm_I - Gm_J) * exp(Gm_J - G_j), the middle factor <= 1."""
    xt = tl.trans((X_j.to(tl.float32) * tl.exp(Gm_i - Gm_j)[None, :]).to(X_j.dtype))
    return tl.dot(kE_i, xt, acc=a), tl.dot(qE_i, xt, acc=m)


@triton.jit
def _inv_unit_lower(N, SUB: tl.constexpr):
    """(I + N)^-1 for a strictly lower 16 x 16 N, by tf32 tensor-core products (the inverses are
    rounded to the dot dtype right after, so tf32's mantissa costs nothing visible; full fp32 and
    tf32x3 measured slower). N is nilpotent (N^16 = 0), so the Neumann series sum_p (-N)^p is exact
    and factors as (I - N)(I + N^2)(I + N^4)(I + N^8): six small products instead of a 15-step
    row-by-row substitution."""
    r = tl.arange(0, SUB)
    eye = (r[:, None] == r[None, :]).to(tl.float32)
    n2 = tl.dot(N, N, input_precision="tf32")
    n4 = tl.dot(n2, n2, input_precision="tf32")
    n8 = tl.dot(n4, n4, input_precision="tf32")
    t = tl.dot(eye - N, eye + n2, input_precision="tf32")
    t = tl.dot(t, eye + n4, input_precision="tf32")
    return tl.dot(t, eye + n8, input_precision="tf32")


@triton.jit
def _diag_inverses(a00, a11, a22, a33, b0, b1, b2, b3, SUB: tl.constexpr):
    """The inverses (fp32) of L's four diagonal blocks I + diag(beta_I) A_II, strictly lower parts of A only."""
    cs = tl.arange(0, SUB)
    strict = cs[:, None] > cs[None, :]
    n0 = tl.where(strict, a00, 0.0) * b0[:, None]
    n1 = tl.where(strict, a11, 0.0) * b1[:, None]
    n2 = tl.where(strict, a22, 0.0) * b2[:, None]
    n3 = tl.where(strict, a33, 0.0) * b3[:, None]
    return _inv_unit_lower(n0, SUB), _inv_unit_lower(n1, SUB), _inv_unit_lower(n2, SUB), _inv_unit_lower(n3, SUB)


@triton.jit
def _solve(t00, t11, t22, t33, n10, n20, n21, n30, n31, n32, r0, r1, r2, r3):
    """Block forward substitution for L X = R, given the inverses t_II of L's diagonal blocks and
    its negated off-diagonal blocks n_IJ = -L_IJ:  X_I = t_II (R_I + sum_{J<I} n_IJ X_J).
    Operands in the dot dtype, accumulation in fp32."""
    dt = r0.dtype
    x0 = tl.dot(t00, r0).to(dt)
    x1 = tl.dot(t11, tl.dot(n10, x0, acc=r1.to(tl.float32)).to(dt)).to(dt)
    x2 = tl.dot(t22, tl.dot(n21, x1, acc=tl.dot(n20, x0, acc=r2.to(tl.float32))).to(dt)).to(dt)
    x3 = tl.dot(t33, tl.dot(n32, x2, acc=tl.dot(n31, x1, acc=tl.dot(n30, x0, acc=r3.to(tl.float32)))).to(dt)).to(dt)
    return x0, x1, x2, x3


@triton.jit
def _products(q_ptr, k_ptr, g_ptr, qk_base, t0, T, stride_qt, K, scale, w_ptr, qg_ptr, kd_ptr, s_base,
              m_ptr, m_base, gl_ptr, gl_base, b0, b1, b2, b3,
              BT: tl.constexpr, SUB: tl.constexpr, BK: tl.constexpr, PREP_BK: tl.constexpr):
    """A and M pair of sub-chunks by pair of sub-chunks (ten 16 x 16 products). Stores M (scaled,
    causal) and, per sub-chunk, what the scan needs (_sub_chunk); returns the ten 16 x 16 blocks of A.
    The decayed keys need the chunk's total gate before the sub-chunks reach the end: it is summed
    from a load of the whole chunk's gates up front, which also gives the four sub-chunks' totals."""
    DT: tl.constexpr = w_ptr.dtype.element_ty
    cs = tl.arange(0, SUB)
    # --- intra-chunk products A and M by 16 x 16 blocks (I = row block, J = column block), summed
    #     over blocks of PREP_BK channels: gates are per channel, so channels are independent until
    #     the sums, and a narrow channel block keeps few registers live ---
    z = tl.zeros([SUB, SUB], dtype=tl.float32)
    a00, a10, a11, a20, a21, a22, a30, a31, a32, a33 = z, z, z, z, z, z, z, z, z, z
    m00, m10, m11, m20, m21, m22, m30, m31, m32, m33 = z, z, z, z, z, z, z, z, z, z
    for c0 in range(0, BK, PREP_BK):
        offs_c = c0 + tl.arange(0, PREP_BK)
        carry = tl.zeros([PREP_BK], dtype=tl.float32)
        g64 = _tile(g_ptr, qk_base, t0, T, stride_qt, offs_c, K, BT).to(tl.float32)
        # the four sub-chunks' totals, then theirs: one reduction over the chunk instead of one per row
        tots = tl.sum(tl.reshape(g64, (BT // SUB, SUB, PREP_BK)), axis=1)
        glast = tl.sum(tots, axis=0)
        i4 = tl.arange(0, BT // SUB)[:, None]
        tot0 = tl.sum(tl.where(i4 == 0, tots, 0.0), axis=0)
        tot1 = tl.sum(tl.where(i4 == 1, tots, 0.0), axis=0)
        tot2 = tl.sum(tl.where(i4 == 2, tots, 0.0), axis=0)
        tot3 = tl.sum(tl.where(i4 == 3, tots, 0.0), axis=0)
        tl.store(gl_ptr + gl_base + offs_c, tl.exp(glast))
        kE0, qE0, X0, Gm0, carry = _sub_chunk(q_ptr, k_ptr, g_ptr, qk_base, t0, T, stride_qt, offs_c, K, carry,
                                              glast, b0, scale, w_ptr, qg_ptr, kd_ptr, s_base, 0, DT, BK, SUB,
                                              tot0)
        a00, m00 = _diag(kE0, qE0, X0, a00, m00)
        kE1, qE1, X1, Gm1, carry = _sub_chunk(q_ptr, k_ptr, g_ptr, qk_base, t0 + SUB, T, stride_qt, offs_c, K,
                                              carry, glast, b1, scale, w_ptr, qg_ptr, kd_ptr, s_base, SUB, DT, BK,
                                              SUB, tot1)
        a11, m11 = _diag(kE1, qE1, X1, a11, m11)
        a10, m10 = _pair(kE1, qE1, X0, Gm1, Gm0, a10, m10)
        kE2, qE2, X2, Gm2, carry = _sub_chunk(q_ptr, k_ptr, g_ptr, qk_base, t0 + 2 * SUB, T, stride_qt, offs_c, K,
                                              carry, glast, b2, scale, w_ptr, qg_ptr, kd_ptr, s_base, 2 * SUB, DT,
                                              BK, SUB, tot2)
        a22, m22 = _diag(kE2, qE2, X2, a22, m22)
        a20, m20 = _pair(kE2, qE2, X0, Gm2, Gm0, a20, m20)
        a21, m21 = _pair(kE2, qE2, X1, Gm2, Gm1, a21, m21)
        kE3, qE3, X3, Gm3, carry = _sub_chunk(q_ptr, k_ptr, g_ptr, qk_base, t0 + 3 * SUB, T, stride_qt, offs_c, K,
                                              carry, glast, b3, scale, w_ptr, qg_ptr, kd_ptr, s_base, 3 * SUB, DT,
                                              BK, SUB, tot3)
        a33, m33 = _diag(kE3, qE3, X3, a33, m33)
        a30, m30 = _pair(kE3, qE3, X0, Gm3, Gm0, a30, m30)
        a31, m31 = _pair(kE3, qE3, X1, Gm3, Gm1, a31, m31)
        a32, m32 = _pair(kE3, qE3, X2, Gm3, Gm2, a32, m32)

    # --- M (scaled) out as a full BT x BT tile: causal inside the diagonal blocks, zeros above.
    #     (Leaving the zero blocks unwritten and loading only the causal part in the scan was
    #     measured on the H200: the masked load slowed the scan from 175 to 291 us.) ---
    lower = cs[:, None] >= cs[None, :]
    _put(m_ptr, m_base, 0, BT, cs, tl.where(lower, m00, 0.0) * scale, SUB)
    _put(m_ptr, m_base, 0, BT, SUB + cs, z, SUB)
    _put(m_ptr, m_base, 0, BT, 2 * SUB + cs, z, SUB)
    _put(m_ptr, m_base, 0, BT, 3 * SUB + cs, z, SUB)
    _put(m_ptr, m_base, SUB, BT, cs, m10 * scale, SUB)
    _put(m_ptr, m_base, SUB, BT, SUB + cs, tl.where(lower, m11, 0.0) * scale, SUB)
    _put(m_ptr, m_base, SUB, BT, 2 * SUB + cs, z, SUB)
    _put(m_ptr, m_base, SUB, BT, 3 * SUB + cs, z, SUB)
    _put(m_ptr, m_base, 2 * SUB, BT, cs, m20 * scale, SUB)
    _put(m_ptr, m_base, 2 * SUB, BT, SUB + cs, m21 * scale, SUB)
    _put(m_ptr, m_base, 2 * SUB, BT, 2 * SUB + cs, tl.where(lower, m22, 0.0) * scale, SUB)
    _put(m_ptr, m_base, 2 * SUB, BT, 3 * SUB + cs, z, SUB)
    _put(m_ptr, m_base, 3 * SUB, BT, cs, m30 * scale, SUB)
    _put(m_ptr, m_base, 3 * SUB, BT, SUB + cs, m31 * scale, SUB)
    _put(m_ptr, m_base, 3 * SUB, BT, 2 * SUB + cs, m32 * scale, SUB)
    _put(m_ptr, m_base, 3 * SUB, BT, 3 * SUB + cs, tl.where(lower, m33, 0.0) * scale, SUB)
    return a00, a10, a11, a20, a21, a22, a30, a31, a32, a33


@triton.jit
def _solve_blocks(a00, a10, a11, a20, a21, a22, a30, a31, a32, a33, b0, b1, b2, b3,
                  v_ptr, v_base, t0, T, stride_vt, V, w_ptr, s_base, u_ptr, u_base,
                  BT: tl.constexpr, SUB: tl.constexpr, BK: tl.constexpr, BVP: tl.constexpr,
                  PREP_BK: tl.constexpr, PREP_BV: tl.constexpr):
    """W = L^-1 B (B parked in the W buffer) and U0 = L^-1 (beta V) by block forward substitution,
    sub-chunk by sub-chunk (forming L^-1 explicitly measured slower)."""
    DT: tl.constexpr = w_ptr.dtype.element_ty
    # --- L = I + diag(beta) A, by blocks: inverses of the four diagonal blocks, then block forward
    #     substitution for W = L^-1 B and U0 = L^-1 (beta V) ---
    t00, t11, t22, t33 = _diag_inverses(a00, a11, a22, a33, b0, b1, b2, b3, SUB)
    t00 = t00.to(DT)
    t11 = t11.to(DT)
    t22 = t22.to(DT)
    t33 = t33.to(DT)
    n10 = (a10 * -b1[:, None]).to(DT)
    n20 = (a20 * -b2[:, None]).to(DT)
    n21 = (a21 * -b2[:, None]).to(DT)
    n30 = (a30 * -b3[:, None]).to(DT)
    n31 = (a31 * -b3[:, None]).to(DT)
    n32 = (a32 * -b3[:, None]).to(DT)

    # B = beta exp(G) K was parked in the W buffer: every thread must see the other threads' stores
    # before loading it back, and all must have loaded a block before W overwrites it
    tl.debug_barrier()
    for c0 in range(0, BK, PREP_BK):
        offs_c = c0 + tl.arange(0, PREP_BK)
        r0 = _tile(w_ptr, s_base, 0, BT, BK, offs_c, BK, SUB)
        r1 = _tile(w_ptr, s_base, SUB, BT, BK, offs_c, BK, SUB)
        r2 = _tile(w_ptr, s_base, 2 * SUB, BT, BK, offs_c, BK, SUB)
        r3 = _tile(w_ptr, s_base, 3 * SUB, BT, BK, offs_c, BK, SUB)
        tl.debug_barrier()
        x0, x1, x2, x3 = _solve(t00, t11, t22, t33, n10, n20, n21, n30, n31, n32, r0, r1, r2, r3)
        _put(w_ptr, s_base, 0, BK, offs_c, x0, SUB)
        _put(w_ptr, s_base, SUB, BK, offs_c, x1, SUB)
        _put(w_ptr, s_base, 2 * SUB, BK, offs_c, x2, SUB)
        _put(w_ptr, s_base, 3 * SUB, BK, offs_c, x3, SUB)

    for v0 in range(0, BVP, PREP_BV):
        offs_v = v0 + tl.arange(0, PREP_BV)
        r0 = (_tile(v_ptr, v_base, t0, T, stride_vt, offs_v, V, SUB).to(tl.float32) * b0[:, None]).to(DT)
        r1 = (_tile(v_ptr, v_base, t0 + SUB, T, stride_vt, offs_v, V, SUB).to(tl.float32) * b1[:, None]).to(DT)
        r2 = (_tile(v_ptr, v_base, t0 + 2 * SUB, T, stride_vt, offs_v, V, SUB).to(tl.float32) * b2[:, None]).to(DT)
        r3 = (_tile(v_ptr, v_base, t0 + 3 * SUB, T, stride_vt, offs_v, V, SUB).to(tl.float32) * b3[:, None]).to(DT)
        x0, x1, x2, x3 = _solve(t00, t11, t22, t33, n10, n20, n21, n30, n31, n32, r0, r1, r2, r3)
        _put(u_ptr, u_base, 0, BVP, offs_v, x0, SUB)
        _put(u_ptr, u_base, SUB, BVP, offs_v, x1, SUB)
        _put(u_ptr, u_base, 2 * SUB, BVP, offs_v, x2, SUB)
        _put(u_ptr, u_base, 3 * SUB, BVP, offs_v, x3, SUB)


@triton.jit
def _kda_prep(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr,
    w_ptr, u_ptr, qg_ptr, kd_ptr, m_ptr, gl_ptr,
    T, H, K, V, NT, scale,
    BT: tl.constexpr, SUB: tl.constexpr, BK: tl.constexpr, BVP: tl.constexpr,
    PREP_BK: tl.constexpr, PREP_BV: tl.constexpr, KBUFS: tl.constexpr, HEADS_FIRST: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if USE_PDL:  # let the scan grid launch once every program here has started
        tl.extra.cuda.gdc_launch_dependents()
    if HEADS_FIRST:  # PREP_ORDER "heads": programs launched together share the chunk, not the head
        bh = tl.program_id(0)
        n = tl.program_id(1)  # chunk
    else:
        n = tl.program_id(0)
        bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    DT: tl.constexpr = w_ptr.dtype.element_ty
    t0 = n * BT
    stride_qt = H * K
    stride_vt = H * V
    qk_base = (b.to(tl.int64) * T * H + h) * K
    v_base = (b.to(tl.int64) * T * H + h) * V
    TP = NT * BT
    # this chunk in the W, Qg and Kd buffers: [BH, NT, BT, BK] each, or with SCAN_WQ one [BH, NT, 3, BT, BK]
    # (KBUFS = 3), the three pointers offset by BT x BK
    s_base = (bh.to(tl.int64) * NT + n) * (KBUFS * BT * BK)
    m_base = bh.to(tl.int64) * TP * BT + t0 * BT
    gl_base = (bh.to(tl.int64) * NT + n) * BK
    cs = tl.arange(0, SUB)
    # the four sub-chunks' betas, as separate 16-vectors
    bb = beta_ptr + b.to(tl.int64) * T * H + h
    r16 = t0 + cs
    b0 = tl.load(bb + r16.to(tl.int64) * H, mask=r16 < T, other=0.0).to(tl.float32)
    b1 = tl.load(bb + (r16 + SUB).to(tl.int64) * H, mask=r16 + SUB < T, other=0.0).to(tl.float32)
    b2 = tl.load(bb + (r16 + 2 * SUB).to(tl.int64) * H, mask=r16 + 2 * SUB < T, other=0.0).to(tl.float32)
    b3 = tl.load(bb + (r16 + 3 * SUB).to(tl.int64) * H, mask=r16 + 3 * SUB < T, other=0.0).to(tl.float32)

    a00, a10, a11, a20, a21, a22, a30, a31, a32, a33 = _products(
        q_ptr, k_ptr, g_ptr, qk_base, t0, T, stride_qt, K, scale, w_ptr, qg_ptr, kd_ptr, s_base,
        m_ptr, m_base, gl_ptr, gl_base, b0, b1, b2, b3, BT, SUB, BK, PREP_BK)
    _solve_blocks(a00, a10, a11, a20, a21, a22, a30, a31, a32, a33, b0, b1, b2, b3,
                  v_ptr, v_base, t0, T, stride_vt, V, w_ptr, s_base, u_ptr, bh.to(tl.int64) * TP * BVP + t0 * BVP,
                  BT, SUB, BK, BVP, PREP_BK, PREP_BV)


@triton.jit
def _scan_chunks(w_ptr, u_ptr, qg_ptr, kd_ptr, m_ptr, gl_ptr, o_ptr, S, n0, n1, bh, b, h, T, H, V, NT, offs_v,
                 BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVP: tl.constexpr, WQ: tl.constexpr):
    """Chunks n0 .. n1 of one (batch*head, block of V columns), from the state S entering chunk n0:
    U = U0 - W S;  O = Qg S + M U;  S = exp(G_last) * S + Kd^T U.  Returns the state leaving chunk n1 - 1.
    WQ (SCAN_WQ): W, Qg and Kd interleaved per chunk, W S and Qg S as one product."""
    DT: tl.constexpr = w_ptr.dtype.element_ty
    rows = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    TP = NT * BT
    KBUFS: tl.constexpr = 3 if WQ else 1
    k_base = bh.to(tl.int64) * TP * (KBUFS * BK)
    u_base = bh.to(tl.int64) * TP * BVP
    m_base = bh.to(tl.int64) * TP * BT
    o_base = (b.to(tl.int64) * T * H + h) * V
    for n in range(n0, n1):
        r = n * BT + rows
        if WQ:  # rows BT .. 2 BT past W's are Qg's
            chunk = k_base + n * (KBUFS * BT * BK)
            kk = chunk + rows[:, None] * BK + offs_k[None, :]
            wq = tl.load(w_ptr + chunk + tl.arange(0, 2 * BT)[:, None] * BK + offs_k[None, :])
        else:
            kk = k_base + r[:, None] * BK + offs_k[None, :]
            w = tl.load(w_ptr + kk)
            qg = tl.load(qg_ptr + kk)
        kd = tl.load(kd_ptr + kk)
        u0 = tl.load(u_ptr + u_base + r[:, None] * BVP + offs_v[None, :]).to(tl.float32)
        m = tl.load(m_ptr + m_base + r[:, None] * BT + rows[None, :])
        gl = tl.load(gl_ptr + (bh.to(tl.int64) * NT + n) * BK + offs_k)
        s = S.to(DT)
        if WQ:
            ws, qs = tl.split(tl.permute(tl.reshape(tl.dot(wq, s), (2, BT, BV)), (1, 2, 0)))
            u = (u0 - ws).to(DT)
            o = tl.dot(m, u, acc=qs)
        else:
            u = (u0 - tl.dot(w, s)).to(DT)
            o = tl.dot(m, u, acc=tl.dot(qg, s))
        omask = (r < T)[:, None] & (offs_v < V)[None, :]
        tl.store(o_ptr + o_base + r[:, None].to(tl.int64) * (H * V) + offs_v[None, :],
                 o.to(o_ptr.dtype.element_ty), mask=omask)
        # (the state's product before the output's, which the next chunk does not wait on, measured
        # slower on the H200: 227 against 178 us, kernels/problems/kda/NOTES.md, "Measured and dropped")
        S = tl.dot(tl.trans(kd), u, acc=S * gl[:, None])
    return S


# NT is not specialized: Triton's launcher makes an integer argument equal to 1 a constant, and the
# scan compiled for NT == 1 (SCAN_BV 32, 4 warps, bf16) gave wrong output rows 16-63 on the H200
# (one chunk, T = 17..64: rel err 0.26 to 1.25; NT >= 2, fp32 and the 8-warp scan were right;
# kernels/problems/kda/NOTES.md, "one-chunk sequences").
# Unspecialized, one compile serves every NT; its sm_90 SASS is the one the headline shapes ran before
# (NT marked divisible by 16 or not: the same instructions; kernels/problems/kda/NOTES.md, "Fix").
@triton.jit(do_not_specialize=["NT"])
def _kda_scan(
    w_ptr, u_ptr, qg_ptr, kd_ptr, m_ptr, gl_ptr, o_ptr,
    T, H, V, NT,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVP: tl.constexpr, USE_PDL: tl.constexpr,
    WQ: tl.constexpr,
):
    """The whole sequence of one (batch*head, block of V columns), from a zero state."""
    if USE_PDL:  # launched early: wait until the preparation has finished and its writes are visible
        tl.extra.cuda.gdc_wait()
    bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    offs_v = pid_v * BV + tl.arange(0, BV)
    S = tl.zeros([BK, BV], dtype=tl.float32)
    _scan_chunks(w_ptr, u_ptr, qg_ptr, kd_ptr, m_ptr, gl_ptr, o_ptr, S, 0, NT, bh, bh // H, bh % H, T, H, V, NT,
                 offs_v, BT, BK, BV, BVP, WQ)


# Context parallelism, for few batch*heads: the sequence is cut into segments of CS chunks. The state
# entering segment s is S_s = P_{s-1} S_{s-1} + E_{s-1}, where E_j is the state segment j leaves
# when it starts from zero and P_j (K x K) its transition: the product over its chunks of
# diag(exp(G_last)) - Kd^T W (the scan's update, S' = exp(G_last) * S + Kd^T (U0 - W S), is affine in S).
# _kda_seg_state forms E_j and P_j for every segment but the last, all segments at once: P's columns
# evolve like the state's value columns with U0 = 0 and the identity as the start, so one program runs
# a block of either. _kda_seg_scan then combines them into its segment's entering state (s - 1 small
# products) and scans its segment, writing O. Measured on an H200 (bench/results/h200/kda_cp.json):
# 201.0 against 263.1 us unsplit at B=1,T=8192,H=8 (8 segments), 706.2 against 1011.0 at T=32768,H=8,
# 365.2 against 372.4 at H=16 (4 segments); at 32 heads the scan is not split (2 segments: 693.2
# against 595.1 us).
@triton.jit
def _seg_columns(w_ptr, u_ptr, kd_ptr, gl_ptr, S, n0, n1, bh, NT, cols, BT: tl.constexpr, BK: tl.constexpr,
                 BVP: tl.constexpr, KBUFS: tl.constexpr, HAS_U: tl.constexpr):
    """Chunks n0 .. n1 of the state update alone, for the state columns `cols`: value columns (HAS_U)
    or columns of a transition (U0 = 0)."""
    DT: tl.constexpr = w_ptr.dtype.element_ty
    rows = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    k_base = bh.to(tl.int64) * NT * (KBUFS * BT * BK)
    u_base = bh.to(tl.int64) * NT * BT * BVP
    for n in range(n0, n1):
        kk = k_base + n * (KBUFS * BT * BK) + rows[:, None] * BK + offs_k[None, :]
        w = tl.load(w_ptr + kk)
        kd = tl.load(kd_ptr + kk)
        gl = tl.load(gl_ptr + (bh.to(tl.int64) * NT + n) * BK + offs_k)
        ws = tl.dot(w, S.to(DT))
        if HAS_U:
            u0 = tl.load(u_ptr + u_base + (n * BT + rows)[:, None] * BVP + cols[None, :]).to(tl.float32)
            u = (u0 - ws).to(DT)
        else:
            u = (-ws).to(DT)
        S = tl.dot(tl.trans(kd), u, acc=S * gl[:, None])
    return S


@triton.jit(do_not_specialize=["NT", "CS", "NSM1"])
def _kda_seg_state(
    w_ptr, u_ptr, kd_ptr, gl_ptr, e_ptr, p_ptr,
    NT, CS, NSM1,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVP: tl.constexpr, WQ: tl.constexpr,
):
    """E_s (columns blocks 0 .. BVP/BV) and P_s (the blocks after) of segment s = program_id(1), which
    runs over every segment but the last; P_0 is never needed (nothing enters segment 0)."""
    bh = tl.program_id(0)
    seg = tl.program_id(1)
    cb = tl.program_id(2)
    NVB: tl.constexpr = BVP // BV
    KBUFS: tl.constexpr = 3 if WQ else 1
    n0 = seg * CS
    n1 = tl.minimum(NT, n0 + CS)
    offs_k = tl.arange(0, BK)
    tr = bh.to(tl.int64) * NSM1 + seg
    if cb < NVB:
        cols = cb * BV + tl.arange(0, BV)
        S = _seg_columns(w_ptr, u_ptr, kd_ptr, gl_ptr, tl.zeros([BK, BV], dtype=tl.float32), n0, n1, bh, NT, cols,
                         BT, BK, BVP, KBUFS, True)
        tl.store(e_ptr + tr * (BK * BVP) + offs_k[:, None] * BVP + cols[None, :], S)
    elif seg > 0:
        cols = (cb - NVB) * BV + tl.arange(0, BV)
        S = (offs_k[:, None] == cols[None, :]).to(tl.float32)
        S = _seg_columns(w_ptr, u_ptr, kd_ptr, gl_ptr, S, n0, n1, bh, NT, cols, BT, BK, BVP, KBUFS, False)
        tl.store(p_ptr + tr * (BK * BK) + offs_k[:, None] * BK + cols[None, :], S.to(p_ptr.dtype.element_ty))


@triton.jit(do_not_specialize=["NT", "CS", "NSM1"])
def _kda_seg_scan(
    w_ptr, u_ptr, qg_ptr, kd_ptr, m_ptr, gl_ptr, o_ptr, e_ptr, p_ptr,
    T, H, V, NT, CS, NSM1,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVP: tl.constexpr, WQ: tl.constexpr,
):
    """Segment s = program_id(2) of one (batch*head, block of V columns): the state entering it from
    the segments' E and P, then its chunks."""
    bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    seg = tl.program_id(2)
    DT: tl.constexpr = w_ptr.dtype.element_ty
    offs_k = tl.arange(0, BK)
    offs_v = pid_v * BV + tl.arange(0, BV)
    tr = bh.to(tl.int64) * NSM1
    S = tl.zeros([BK, BV], dtype=tl.float32)
    if seg > 0:
        S = tl.load(e_ptr + tr * (BK * BVP) + offs_k[:, None] * BVP + offs_v[None, :])
        for j in tl.range(1, seg, num_stages=1):
            e = tl.load(e_ptr + (tr + j) * (BK * BVP) + offs_k[:, None] * BVP + offs_v[None, :])
            p = tl.load(p_ptr + (tr + j) * (BK * BK) + offs_k[:, None] * BK + offs_k[None, :])
            S = tl.dot(p, S.to(DT), acc=e)
    n0 = seg * CS
    _scan_chunks(w_ptr, u_ptr, qg_ptr, kd_ptr, m_ptr, gl_ptr, o_ptr, S, n0, tl.minimum(NT, n0 + CS),
                 bh, bh // H, bh % H, T, H, V, NT, offs_v, BT, BK, BV, BVP, WQ)


def _segments(B: int, H: int, NT: int, BVP: int, sms: int) -> int:
    """How many segments to cut the sequence into: none (1) where today's scan, one program per
    (batch*head, SCAN_BV columns), already fills CP_BELOW of the SMs; else as many as keep one wave of
    segment-scan programs (CP_BV columns each) and CP_MIN_CHUNKS chunks per segment, up to CP_SEGS."""
    if not CONFIG["CP_SEGS"] or B * H * (BVP // min(BVP, CONFIG["SCAN_BV"])) >= CONFIG["CP_BELOW"] * sms:
        return 1
    per_segment = B * H * (BVP // min(BVP, CONFIG["CP_BV"]))
    return max(1, min(CONFIG["CP_SEGS"], sms // per_segment, NT // CONFIG["CP_MIN_CHUNKS"]))


def kda(q, k, v, g, beta, scale):
    B, T, H, K = q.shape
    V = v.shape[-1]
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    BT = CHUNK
    NT = triton.cdiv(T, BT)
    TP = NT * BT
    BK = max(SUB, triton.next_power_of_2(K))
    BVP = max(SUB, triton.next_power_of_2(V))
    # bf16 tensor-core operands on the GPU; fp32 elsewhere (the interpreter cannot dot bf16)
    dt = torch.bfloat16 if v.dtype == torch.bfloat16 else torch.float32
    dev = q.device
    # per-chunk intermediates, padded to whole chunks and power-of-two widths: the preparation
    # writes every element (zeros past T), so the scan loads them without masks
    wq = bool(CONFIG["SCAN_WQ"])
    wqk = torch.empty((B * H, NT, 3 if wq else 1, BT, BK), device=dev, dtype=dt)
    w, qg, kd = (wqk[:, :, 0], wqk[:, :, 1], wqk[:, :, 2]) if wq else (
        wqk, torch.empty_like(wqk), torch.empty_like(wqk))
    u0 = torch.empty((B * H, TP, BVP), device=dev, dtype=dt)
    m = torch.empty((B * H, TP, BT), device=dev, dtype=dt)
    gl = torch.empty((B * H, NT, BK), device=dev, dtype=torch.float32)
    o = torch.empty((B, T, H, V), device=dev, dtype=v.dtype)
    pdl = bool(CONFIG["SCAN_PDL"]) and q.is_cuda
    heads_first = CONFIG["PREP_ORDER"] == "heads"
    _kda_prep[(B * H, NT) if heads_first else (NT, B * H)](
        q, k, v, g, beta, w, u0, qg, kd, m, gl, T, H, K, V, NT, scale,
        BT=BT, SUB=SUB, BK=BK, BVP=BVP, PREP_BK=min(BK, CONFIG["PREP_BK"]), PREP_BV=min(BVP, CONFIG["PREP_BV"]),
        KBUFS=3 if wq else 1, HEADS_FIRST=heads_first, USE_PDL=pdl, num_warps=CONFIG["PREP_WARPS"],
        **({"maxnreg": CONFIG["PREP_MAXNREG"]} if CONFIG["PREP_MAXNREG"] else {}),
    )
    # the SM count decides the segments; the interpreter has none, so it stands in a GPU-sized count
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if q.is_cuda else 132
    segs = _segments(B, H, NT, BVP, sms)
    if segs > 1:
        CS = triton.cdiv(NT, segs)
        segs = triton.cdiv(NT, CS)  # no empty segment
    if segs > 1:
        # E_s (fp32: it is added) and P_s (a product's operand) of every segment but the last
        e = torch.empty((B * H, segs - 1, BK, BVP), device=dev, dtype=torch.float32)
        p = torch.empty((B * H, segs - 1, BK, BK), device=dev, dtype=dt)
        TBV = min(BK, BVP, CONFIG["CP_TBV"])
        _kda_seg_state[(B * H, segs - 1, BVP // TBV + BK // TBV)](
            w, u0, kd, gl, e, p, NT, CS, segs - 1, BT=BT, BK=BK, BV=TBV, BVP=BVP, WQ=wq,
            num_warps=CONFIG["CP_TWARPS"], num_stages=CONFIG["CP_TSTAGES"])
        BV = min(BVP, CONFIG["CP_BV"])
        _kda_seg_scan[(B * H, BVP // BV, segs)](
            w, u0, qg, kd, m, gl, o, e, p, T, H, V, NT, CS, segs - 1, BT=BT, BK=BK, BV=BV, BVP=BVP, WQ=wq,
            num_warps=CONFIG["CP_WARPS"], num_stages=CONFIG["CP_STAGES"])
        return o
    many = "_MANY" if B * H >= CONFIG["MANY_HEADS"] else ""
    BV = min(BVP, CONFIG["SCAN_BV" + many])
    _kda_scan[(B * H, BVP // BV)](
        w, u0, qg, kd, m, gl, o, T, H, V, NT,
        BT=BT, BK=BK, BV=BV, BVP=BVP, USE_PDL=pdl, WQ=wq, num_warps=CONFIG["SCAN_WARPS" + many],
        num_stages=CONFIG["SCAN_STAGES" + many],
        **({"launch_pdl": True} if pdl else {}),  # a launch option of the NVIDIA backend only
    )
    return o
