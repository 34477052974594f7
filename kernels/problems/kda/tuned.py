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
sub-chunk's total (PREP_CENTRE; G runs from the one to the other, so |G - Gm| <= 8 * 5 = 40). It
forms E = exp(G - Gm) (E <= e^40, far inside fp32 and bf16 range) and, for a pair of sub-chunks
I > J, multiplies in the per-channel factor exp(Gm_I - Gm_J) <= 1. Every factor then stays finite for
any per-token gate g >= -11; products that underflow to zero are ones whose true value is below
~1e-38 anyway.
The problem's gates are >= -5.

Dtypes: on the GPU the intermediates and tensor-core operands are bf16 with fp32 accumulation; the
state, gates and exponentials are fp32; the inverses of the solve's 16 x 16 diagonal blocks are
formed from fp32 inputs by tf32 tensor-core products (PREP_INV) and rounded to bf16 for the block
substitution around them, which takes bf16 operands. For
fp16/fp32 inputs (the CPU interpreter, where tl.dot on bf16 is not usable) everything runs in fp32."""
import torch
import triton
import triton.language as tl

# knobs a tuner may turn (kernels/problems/tunables.py); the launcher reads CONFIG.
# CHUNK is 64 only: the preparation kernel is written out for four 16-token sub-chunks.
# CONFIG holds the fastest settings measured on an H200: the preparation's from
# kda_log_run1.txt @a2c9222; the few-heads scan's (SCAN_BV=32) from the scan timed alone on
# random operands (kda_scan_speed.json @e776486: 176 us against 330 us for SCAN_BV=16 at
# B=1, T=8192, H=32; run 1's SCAN_BV=32 rows had failed only after an earlier fault poisoned the
# process). The diagonal-block inverses by tf32 products (PREP_INV): the preparation
# 497.6 us against 525.3 with ieee (kda_forms_tune.json @bb2fa31). Judged end to end:
# 680.5 us against FLA's 999.9 us at B=1,T=8192, 1.47x (kda_tuned_tf32_B_1_T_8192.json @32a721a);
# the "columns" form, register caps, the carry variant and tf32x3 measured slower
# (kernels/problems/kda/NOTES.md). PREP_CENTRE "half_tots" (the sub-chunks'
# re-centring gates and carries from one reduction over the chunk's gates instead of eight over rows:
# the preparation 413.1 us against 485.4) and
# SCAN_WQ (173.9 against 175.9 us) (kda_forms_tune.json @6dceb6d); judged end to end
# 594.4 us against FLA's 996 us at B=1,T=8192, 1.68x, and 1.69x and 1.67x at the other two headline
# shapes (kda_tuned_B_1_T_8192.json @6dceb6d, kda_tuned_shapes.json @6dceb6d). With the
# scan's NT unspecialized (below) judged again: 592.4 us against 996.5, 1.68x; 1.69x and 1.68x
# (bench/results/h200/kda_tuned_bench.json); correct on the sweep shape set (bench/results/h200/kda_tuned_sweep.json).
TUNABLES = {
    "CHUNK": (64,),
    "PREP_BK": (32, 64, 128),  # channels per step of the preparation (128: one step, fastest measured)
    "PREP_BV": (32, 64, 128),  # value columns per step of its U0 = L^-1 (beta V)
    "PREP_WARPS": (4, 8),
    # how the intra-chunk products A and M are formed: "pairs" of 16-row sub-chunks (ten 16 x 16
    # products, small tensor-core tiles) or "columns" (four tall 64 x 16 products, one per column
    # block, which Hopper runs as wgmma); and a register cap for the preparation (0: the compiler's
    # choice, 255 at 4 warps, which allows 2 programs per SM)
    "PREP_FORM": ("pairs", "columns"),
    "PREP_MAXNREG": (0, 128, 168),
    # pairs only: the chunk's total gate from a load of all its gates up front ("load") or from the
    # running sum after the last sub-chunk ("carry"; the decayed keys are then stored at the end)
    "PREP_GLAST": ("load", "carry"),
    # the precision of the products that invert the solve's 16 x 16 diagonal blocks: "ieee" (full fp32,
    # on the FMA units) or tensor-core tf32 ("tf32x3": three tf32 products, about fp32's accuracy);
    # the inverses are rounded to the dot dtype (bf16 on the GPU) right after
    "PREP_INV": ("ieee", "tf32x3", "tf32"),
    # how the solve gives W and U0: "blocks" (forward substitution sub-chunk by sub-chunk, a chain of
    # seven dependent 16-row products per right-hand side) or "inverse" (L^-1 diag(beta) formed
    # explicitly from the diagonal-block inverses by 16 x 16 products, then one 64-row product per
    # right-hand side; 544.9 against 494.5 us, kda_forms_tune.json @01e9d25)
    "PREP_SOLVE": ("blocks", "inverse"),
    # fewer layout conversions (each a round trip through shared memory between CTA barriers):
    # "inverses", the four diagonal-block inverses as one batched [4, 16, 16] product chain; "stores",
    # M, W and U0 stored as whole 64-row tiles assembled in registers instead of sixteen, four and four
    # 16-row ones; "all", both (none faster beside PREP_CENTRE "half_tots":
    # kda_forms_tune.json @6dceb6d)
    "PREP_STACK": ("none", "inverses", "stores", "all"),
    # pairs only: each sub-chunk's re-centring gate Gm, the gate at its middle row ("middle", a
    # reduction over the rows to extract it) or the gate before it plus half its total ("half", from
    # the total the next sub-chunk's carry needs anyway); both keep |G - Gm| <= 8 max|g|. "half_tots":
    # "half" with the four sub-chunks' totals summed from the chunk's gates loaded up front (PREP_GLAST
    # "load", whose load it reuses), one reduction instead of four
    "PREP_CENTRE": ("middle", "half", "half_tots"),
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
}
CONFIG = {"CHUNK": 64, "PREP_BK": 128, "PREP_BV": 128, "PREP_WARPS": 4, "PREP_FORM": "pairs", "PREP_MAXNREG": 0,
          "PREP_GLAST": "load", "PREP_INV": "tf32", "PREP_SOLVE": "blocks", "PREP_STACK": "none",
          "PREP_CENTRE": "half_tots", "PREP_ORDER": "chunks",
          "MANY_HEADS": 128, "SCAN_BV": 32, "SCAN_WARPS": 4, "SCAN_STAGES": 3,
          "SCAN_BV_MANY": 64, "SCAN_WARPS_MANY": 8, "SCAN_STAGES_MANY": 3, "SCAN_PDL": False,
          "SCAN_WQ": True}

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
def _join4(x0, x1, x2, x3):
    """Four tiles of one shape as one tensor with two trailing size-2 dims: [..., i, j] is tile 2 j + i."""
    return tl.join(tl.join(x0, x1), tl.join(x2, x3))


@triton.jit
def _rows4(x0, x1, x2, x3, R: tl.constexpr, C: tl.constexpr):
    """Four [R, C] tiles stacked by rows as one [4 R, C] tile (PREP_STACK "stores")."""
    return tl.reshape(tl.permute(_join4(x0, x1, x2, x3), (3, 2, 0, 1)), (4 * R, C))


@triton.jit
def _put4(ptr, base, stride_r, cols, x0, x1, x2, x3, SUB: tl.constexpr, C: tl.constexpr, STACK: tl.constexpr):
    """Store four SUB-row tiles at rows 0, SUB, 2 SUB, 3 SUB: with STACK as one 4 SUB-row tile."""
    if STACK:
        _put(ptr, base, 0, stride_r, cols, _rows4(x0, x1, x2, x3, SUB, C), 4 * SUB)
    else:
        _put(ptr, base, 0, stride_r, cols, x0, SUB)
        _put(ptr, base, SUB, stride_r, cols, x1, SUB)
        _put(ptr, base, 2 * SUB, stride_r, cols, x2, SUB)
        _put(ptr, base, 3 * SUB, stride_r, cols, x3, SUB)


@triton.jit
def _inv_unit_lower4(n0, n1, n2, n3, SUB: tl.constexpr, PREC: tl.constexpr, STACK: tl.constexpr):
    """_inv_unit_lower of four 16 x 16 blocks; with STACK as one batched [4, 16, 16] product chain
    (one warp per block) instead of four chains."""
    if STACK:
        n = tl.reshape(tl.permute(_join4(n0, n1, n2, n3), (3, 2, 0, 1)), (4, SUB, SUB))
        t = tl.permute(tl.reshape(_inv_unit_lower(n, SUB, PREC), (2, 2, SUB, SUB)), (2, 3, 1, 0))
        lo, hi = tl.split(t)
        t0, t1 = tl.split(lo)
        t2, t3 = tl.split(hi)
    else:
        t0 = _inv_unit_lower(n0, SUB, PREC)
        t1 = _inv_unit_lower(n1, SUB, PREC)
        t2 = _inv_unit_lower(n2, SUB, PREC)
        t3 = _inv_unit_lower(n3, SUB, PREC)
    return t0, t1, t2, t3


@triton.jit
def _sub_chunk(q_ptr, k_ptr, g_ptr, qk_base, row0, T, stride_qt, offs_c, K, carry, glast, beta, scale,
               w_ptr, qg_ptr, kd_ptr, s_base, s_row0, DT: tl.constexpr, BK: tl.constexpr, SUB: tl.constexpr,
               STORE_KD: tl.constexpr, B_BETA: tl.constexpr, CENTRE_HALF: tl.constexpr, tot_in,
               TOT_GIVEN: tl.constexpr):
    """One 16-token sub-chunk, for the channels offs_c: its cumulative gates (carry = G just before
    it), re-centred at Gm: the gate at its middle row, or with CENTRE_HALF (PREP_CENTRE "half") the carry
    plus half the sub-chunk's total gate, which bounds |G - Gm| as tightly without a row extraction
    (with TOT_GIVEN that total is tot_in, else summed here). Stores what the scan needs from it (the gated queries
    scale*q*exp(G) and, with STORE_KD, decayed keys k*exp(G_last - G)) and, into the W buffer as scratch,
    B = beta*k*exp(G), the right-hand side of the solve (k*exp(G) without B_BETA: PREP_SOLVE "inverse"
    folds beta into L^-1). Returns the re-centred operands of the
    intra-chunk products
      kE = k exp(G - Gm),  qE = q exp(G - Gm),  X = k exp(Gm - G)     (in the dot dtype)
    with Gm and the carry for the next sub-chunk."""
    g = _tile(g_ptr, qk_base, row0, T, stride_qt, offs_c, K, SUB).to(tl.float32)  # 0 past T: G stays flat
    G = tl.cumsum(g, axis=0) + carry[None, :]
    if TOT_GIVEN:
        tot = tot_in
    else:
        tot = tl.sum(g, axis=0)
    if CENTRE_HALF:  # G runs from carry + g_0 down to carry + tot
        Gm = carry + 0.5 * tot
    else:
        r = tl.arange(0, SUB)
        Gm = tl.sum(tl.where((r == SUB // 2)[:, None], G, 0.0), axis=0)
    D = G - Gm[None, :]  # |D| <= 8 * max|g|
    E = tl.exp(D)
    k = _tile(k_ptr, qk_base, row0, T, stride_qt, offs_c, K, SUB).to(tl.float32)
    q = _tile(q_ptr, qk_base, row0, T, stride_qt, offs_c, K, SUB).to(tl.float32)
    kE = k * E
    qE = q * E
    X = k * tl.exp(-D)
    eGm = tl.exp(Gm)  # <= 1: exp(G) = E * exp(Gm), without ever forming exp(-G)
    _put(qg_ptr, s_base, s_row0, BK, offs_c, qE * (scale * eGm)[None, :], SUB)
    if STORE_KD:
        _put(kd_ptr, s_base, s_row0, BK, offs_c, X * tl.exp(glast - Gm)[None, :], SUB)
    if B_BETA:
        _put(w_ptr, s_base, s_row0, BK, offs_c, kE * (beta[:, None] * eGm[None, :]), SUB)
    else:
        _put(w_ptr, s_base, s_row0, BK, offs_c, kE * eGm[None, :], SUB)
    return kE.to(DT), qE.to(DT), X.to(DT), Gm, carry + tot


@triton.jit
def _diag(kE, qE, X, a, m):
    """Accumulate A and M inside one sub-chunk: both sides share its middle row as reference.
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
def _inv_unit_lower(N, SUB: tl.constexpr, PREC: tl.constexpr):
    """(I + N)^-1 for a strictly lower 16 x 16 N, in fp32 products of precision PREC (PREP_INV). N is
    nilpotent (N^16 = 0), so the Neumann series sum_p (-N)^p is exact and factors as
    (I - N)(I + N^2)(I + N^4)(I + N^8): six small products instead of a 15-step row-by-row substitution.
    N may be a batch [n, 16, 16]."""
    r = tl.arange(0, SUB)
    eye = (r[:, None] == r[None, :]).to(tl.float32)
    n2 = tl.dot(N, N, input_precision=PREC)
    n4 = tl.dot(n2, n2, input_precision=PREC)
    n8 = tl.dot(n4, n4, input_precision=PREC)
    t = tl.dot(eye - N, eye + n2, input_precision=PREC)
    t = tl.dot(t, eye + n4, input_precision=PREC)
    return tl.dot(t, eye + n8, input_precision=PREC)


@triton.jit
def _diag_inverses(a00, a11, a22, a33, b0, b1, b2, b3, SUB: tl.constexpr, PREC: tl.constexpr,
                   STACK_INV: tl.constexpr):
    """The inverses (fp32) of L's four diagonal blocks I + diag(beta_I) A_II, strictly lower parts of A only."""
    cs = tl.arange(0, SUB)
    strict = cs[:, None] > cs[None, :]
    return _inv_unit_lower4(tl.where(strict, a00, 0.0) * b0[:, None], tl.where(strict, a11, 0.0) * b1[:, None],
                            tl.where(strict, a22, 0.0) * b2[:, None], tl.where(strict, a33, 0.0) * b3[:, None],
                            SUB, PREC, STACK_INV)


@triton.jit
def _inverse_blocks(a00, a10, a11, a20, a21, a22, a30, a31, a32, a33, b0, b1, b2, b3,
                    SUB: tl.constexpr, PREC: tl.constexpr, DT: tl.constexpr, STACK_INV: tl.constexpr):
    """PREP_SOLVE "inverse": the ten lower 16 x 16 blocks of T = L^-1, L = I + diag(beta) A, in DT
    (the diagonal ones from fp32 products of precision PREC). With t_II the diagonal blocks' inverses
    and L_IJ = diag(beta_I) A_IJ, row block I of L T = I gives T_IJ = -t_II sum_{J<=P<I} L_IP T_PJ; the
    three first sub-diagonal blocks are independent, so the dependent chain is six small products deep."""
    t00, t11, t22, t33 = _diag_inverses(a00, a11, a22, a33, b0, b1, b2, b3, SUB, PREC, STACK_INV)
    l10 = (a10 * b1[:, None]).to(DT)
    l20 = (a20 * b2[:, None]).to(DT)
    l21 = (a21 * b2[:, None]).to(DT)
    l30 = (a30 * b3[:, None]).to(DT)
    l31 = (a31 * b3[:, None]).to(DT)
    l32 = (a32 * b3[:, None]).to(DT)
    # the off-diagonal blocks in the dot dtype (bf16 on the GPU) with fp32 accumulation, as the
    # block substitution does; each block rounded once before it feeds a later one
    t00 = t00.to(DT)
    t11 = t11.to(DT)
    t22 = t22.to(DT)
    t33 = t33.to(DT)
    T10 = (-tl.dot(t11, tl.dot(l10, t00).to(DT))).to(DT)
    T21 = (-tl.dot(t22, tl.dot(l21, t11).to(DT))).to(DT)
    T32 = (-tl.dot(t33, tl.dot(l32, t22).to(DT))).to(DT)
    T20 = (-tl.dot(t22, tl.dot(l21, T10, acc=tl.dot(l20, t00)).to(DT))).to(DT)
    T31 = (-tl.dot(t33, tl.dot(l32, T21, acc=tl.dot(l31, t11)).to(DT))).to(DT)
    T30 = (-tl.dot(t33, tl.dot(l32, T20, acc=tl.dot(l31, T10, acc=tl.dot(l30, t00))).to(DT))).to(DT)
    return t00, T10, t11, T20, T21, t22, T30, T31, T32, t33


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
def _products_pairs(q_ptr, k_ptr, g_ptr, qk_base, t0, T, stride_qt, K, scale, w_ptr, qg_ptr, kd_ptr, s_base,
                    m_ptr, m_base, gl_ptr, gl_base, b0, b1, b2, b3,
                    BT: tl.constexpr, SUB: tl.constexpr, BK: tl.constexpr, PREP_BK: tl.constexpr,
                    GLAST_CARRY: tl.constexpr, B_BETA: tl.constexpr, STACK_ST: tl.constexpr,
                    CENTRE_HALF: tl.constexpr, TOTS: tl.constexpr):
    """PREP_FORM "pairs": A and M pair of sub-chunks by pair of sub-chunks. Stores M (scaled, causal)
    and, per sub-chunk, what the scan needs (_sub_chunk); returns the ten 16 x 16 blocks of A.
    The decayed keys need the chunk's total gate: PREP_GLAST "load" sums it from a load of the whole
    chunk's gates up front, "carry" takes the running sum after the last sub-chunk and stores the
    decayed keys then, from the bf16 X (one more rounding; one 64-row load and reduction fewer)."""
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
        if GLAST_CARRY:
            glast = carry  # not used before the last sub-chunk
            tot0, tot1, tot2, tot3 = carry, carry, carry, carry  # not used
        else:  # the chunk's total gate, needed by the decayed keys before the sub-chunks reach the end
            g64 = _tile(g_ptr, qk_base, t0, T, stride_qt, offs_c, K, BT).to(tl.float32)
            if TOTS:  # the four sub-chunks' totals, then theirs
                tots = tl.sum(tl.reshape(g64, (BT // SUB, SUB, PREP_BK)), axis=1)
                glast = tl.sum(tots, axis=0)
                i4 = tl.arange(0, BT // SUB)[:, None]
                tot0 = tl.sum(tl.where(i4 == 0, tots, 0.0), axis=0)
                tot1 = tl.sum(tl.where(i4 == 1, tots, 0.0), axis=0)
                tot2 = tl.sum(tl.where(i4 == 2, tots, 0.0), axis=0)
                tot3 = tl.sum(tl.where(i4 == 3, tots, 0.0), axis=0)
            else:
                glast = tl.sum(g64, axis=0)
                tot0, tot1, tot2, tot3 = glast, glast, glast, glast  # not used
            tl.store(gl_ptr + gl_base + offs_c, tl.exp(glast))
        kE0, qE0, X0, Gm0, carry = _sub_chunk(q_ptr, k_ptr, g_ptr, qk_base, t0, T, stride_qt, offs_c, K, carry,
                                              glast, b0, scale, w_ptr, qg_ptr, kd_ptr, s_base, 0, DT, BK, SUB,
                                              not GLAST_CARRY, B_BETA, CENTRE_HALF, tot0, TOTS)
        a00, m00 = _diag(kE0, qE0, X0, a00, m00)
        kE1, qE1, X1, Gm1, carry = _sub_chunk(q_ptr, k_ptr, g_ptr, qk_base, t0 + SUB, T, stride_qt, offs_c, K,
                                              carry, glast, b1, scale, w_ptr, qg_ptr, kd_ptr, s_base, SUB, DT, BK,
                                              SUB, not GLAST_CARRY, B_BETA, CENTRE_HALF, tot1, TOTS)
        a11, m11 = _diag(kE1, qE1, X1, a11, m11)
        a10, m10 = _pair(kE1, qE1, X0, Gm1, Gm0, a10, m10)
        kE2, qE2, X2, Gm2, carry = _sub_chunk(q_ptr, k_ptr, g_ptr, qk_base, t0 + 2 * SUB, T, stride_qt, offs_c, K,
                                              carry, glast, b2, scale, w_ptr, qg_ptr, kd_ptr, s_base, 2 * SUB, DT,
                                              BK, SUB, not GLAST_CARRY, B_BETA, CENTRE_HALF, tot2, TOTS)
        a22, m22 = _diag(kE2, qE2, X2, a22, m22)
        a20, m20 = _pair(kE2, qE2, X0, Gm2, Gm0, a20, m20)
        a21, m21 = _pair(kE2, qE2, X1, Gm2, Gm1, a21, m21)
        kE3, qE3, X3, Gm3, carry = _sub_chunk(q_ptr, k_ptr, g_ptr, qk_base, t0 + 3 * SUB, T, stride_qt, offs_c, K,
                                              carry, glast, b3, scale, w_ptr, qg_ptr, kd_ptr, s_base, 3 * SUB, DT,
                                              BK, SUB, not GLAST_CARRY, B_BETA, CENTRE_HALF, tot3, TOTS)
        a33, m33 = _diag(kE3, qE3, X3, a33, m33)
        a30, m30 = _pair(kE3, qE3, X0, Gm3, Gm0, a30, m30)
        a31, m31 = _pair(kE3, qE3, X1, Gm3, Gm1, a31, m31)
        a32, m32 = _pair(kE3, qE3, X2, Gm3, Gm2, a32, m32)
        if GLAST_CARRY:  # carry is now the chunk's total gate
            tl.store(gl_ptr + gl_base + offs_c, tl.exp(carry))
            _put(kd_ptr, s_base, 0, BK, offs_c, X0.to(tl.float32) * tl.exp(carry - Gm0)[None, :], SUB)
            _put(kd_ptr, s_base, SUB, BK, offs_c, X1.to(tl.float32) * tl.exp(carry - Gm1)[None, :], SUB)
            _put(kd_ptr, s_base, 2 * SUB, BK, offs_c, X2.to(tl.float32) * tl.exp(carry - Gm2)[None, :], SUB)
            _put(kd_ptr, s_base, 3 * SUB, BK, offs_c, X3.to(tl.float32) * tl.exp(carry - Gm3)[None, :], SUB)

    # --- M (scaled) out as a full BT x BT tile: causal inside the diagonal blocks, zeros above.
    #     (Leaving the zero blocks unwritten and loading only the causal part in the scan was
    #     measured on the H200: the masked load slowed the scan from 175 to 291 us.) ---
    lower = cs[:, None] >= cs[None, :]
    if STACK_ST:  # one 64 x 64 tile: column block J of the rows stacked, transposed back
        DTM: tl.constexpr = m_ptr.dtype.element_ty
        zm = tl.zeros([SUB, SUB], dtype=DTM)
        c0 = _rows4((tl.where(lower, m00, 0.0) * scale).to(DTM), (m10 * scale).to(DTM), (m20 * scale).to(DTM),
                    (m30 * scale).to(DTM), SUB, SUB)
        c1 = _rows4(zm, (tl.where(lower, m11, 0.0) * scale).to(DTM), (m21 * scale).to(DTM), (m31 * scale).to(DTM),
                    SUB, SUB)
        c2 = _rows4(zm, zm, (tl.where(lower, m22, 0.0) * scale).to(DTM), (m32 * scale).to(DTM), SUB, SUB)
        c3 = _rows4(zm, zm, zm, (tl.where(lower, m33, 0.0) * scale).to(DTM), SUB, SUB)
        mt = _rows4(tl.trans(c0), tl.trans(c1), tl.trans(c2), tl.trans(c3), SUB, BT)
        _put(m_ptr, m_base, 0, BT, tl.arange(0, BT), tl.trans(mt), BT)
    else:
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
def _block(x3, blk3, I):
    """Sub-chunk I of a [sub-chunk, row, column] tensor, as [row, column]."""
    return tl.sum(tl.where(blk3 == I, x3, 0.0), axis=0)


@triton.jit
def _column(kE3, qE3, X3, Gm3, blk3, J, a, m, BT: tl.constexpr, PREP_BK: tl.constexpr, DT: tl.constexpr):
    """Accumulate column block J of A and M, all BT rows in one tall product: for row i in sub-chunk
    I >= J and column j in J, exp(G_i - G_j) = exp(G_i - Gm_I) exp(Gm_I - Gm_J) exp(Gm_J - G_j), the
    middle factor <= 1. Rows of earlier sub-chunks, where it would overflow, are zeroed."""
    GmJ = tl.sum(tl.where(blk3 == J, Gm3, 0.0), axis=0, keep_dims=True)
    f = tl.where(blk3 >= J, tl.exp(tl.minimum(Gm3 - GmJ, 0.0)), 0.0)
    xt = tl.trans(_block(X3, blk3, J).to(DT))
    p = tl.reshape(kE3 * f, (BT, PREP_BK)).to(DT)
    pq = tl.reshape(qE3 * f, (BT, PREP_BK)).to(DT)
    return tl.dot(p, xt, acc=a), tl.dot(pq, xt, acc=m)


@triton.jit
def _products_columns(q_ptr, k_ptr, g_ptr, qk_base, t0, T, H, stride_qt, K, scale, w_ptr, qg_ptr, kd_ptr,
                      s_base, m_ptr, m_base, gl_ptr, gl_base, bb,
                      BT: tl.constexpr, SUB: tl.constexpr, BK: tl.constexpr, PREP_BK: tl.constexpr,
                      B_BETA: tl.constexpr):
    """PREP_FORM "columns": the same A, M and per-token outputs as _products_pairs, with the chunk held
    as [sub-chunk, row, channel] tensors (one load each per channel block) and A, M formed by column
    blocks, four BT x SUB products each. Returns the ten 16 x 16 blocks of A."""
    DT: tl.constexpr = w_ptr.dtype.element_ty
    NS: tl.constexpr = BT // SUB
    cs = tl.arange(0, SUB)
    blk3 = tl.arange(0, NS)[:, None, None]
    row3 = tl.arange(0, SUB)[None, :, None]
    rows3 = t0 + blk3 * SUB + row3
    if B_BETA:
        beta3 = tl.load(bb + rows3.to(tl.int64) * H, mask=rows3 < T, other=0.0).to(tl.float32)
    else:  # PREP_SOLVE "inverse" folds beta into L^-1
        beta3 = tl.full([NS, SUB, 1], 1.0, tl.float32)
    z = tl.zeros([BT, SUB], dtype=tl.float32)
    a0, a1, a2, a3, m0, m1, m2, m3 = z, z, z, z, z, z, z, z
    for c0 in range(0, BK, PREP_BK):
        c3 = c0 + tl.arange(0, PREP_BK)[None, None, :]
        mask3 = (rows3 < T) & (c3 < K)
        off3 = qk_base + rows3.to(tl.int64) * stride_qt + c3
        g3 = tl.load(g_ptr + off3, mask=mask3, other=0.0).to(tl.float32)  # 0 past T: G stays flat
        tot = tl.sum(g3, axis=1)  # each sub-chunk's total gate, [NS, PREP_BK]
        G3 = tl.cumsum(g3, axis=1) + (tl.cumsum(tot, axis=0) - tot)[:, None, :]
        glast = tl.sum(tot, axis=0)
        tl.store(gl_ptr + gl_base + c0 + tl.arange(0, PREP_BK), tl.exp(glast))
        Gm3 = tl.sum(tl.where(row3 == SUB // 2, G3, 0.0), axis=1, keep_dims=True)  # at each middle row
        D3 = G3 - Gm3  # |D| <= 8 * max|g|
        E3 = tl.exp(D3)
        k3 = tl.load(k_ptr + off3, mask=mask3, other=0.0).to(tl.float32)
        q3 = tl.load(q_ptr + off3, mask=mask3, other=0.0).to(tl.float32)
        kE3 = k3 * E3
        qE3 = q3 * E3
        X3 = k3 * tl.exp(-D3)
        eGm3 = tl.exp(Gm3)  # <= 1: exp(G) = E * exp(Gm), without ever forming exp(-G)
        so3 = s_base + (blk3 * SUB + row3) * BK + c3
        tl.store(qg_ptr + so3, (qE3 * (scale * eGm3)).to(DT))
        tl.store(kd_ptr + so3, (X3 * tl.exp(glast[None, None, :] - Gm3)).to(DT))
        tl.store(w_ptr + so3, (kE3 * (beta3 * eGm3)).to(DT))  # B, the solve's right-hand side
        a0, m0 = _column(kE3, qE3, X3, Gm3, blk3, 0, a0, m0, BT, PREP_BK, DT)
        a1, m1 = _column(kE3, qE3, X3, Gm3, blk3, 1, a1, m1, BT, PREP_BK, DT)
        a2, m2 = _column(kE3, qE3, X3, Gm3, blk3, 2, a2, m2, BT, PREP_BK, DT)
        a3, m3 = _column(kE3, qE3, X3, Gm3, blk3, 3, a3, m3, BT, PREP_BK, DT)
    # M (scaled, causal) out as four BT x SUB column blocks
    rr = tl.arange(0, BT)[:, None]
    _put(m_ptr, m_base, 0, BT, cs, tl.where(rr >= cs[None, :], m0, 0.0) * scale, BT)
    _put(m_ptr, m_base, 0, BT, SUB + cs, tl.where(rr >= SUB + cs[None, :], m1, 0.0) * scale, BT)
    _put(m_ptr, m_base, 0, BT, 2 * SUB + cs, tl.where(rr >= 2 * SUB + cs[None, :], m2, 0.0) * scale, BT)
    _put(m_ptr, m_base, 0, BT, 3 * SUB + cs, tl.where(rr >= 3 * SUB + cs[None, :], m3, 0.0) * scale, BT)
    # the 16 x 16 blocks of A: row block I of column block J
    A0 = tl.reshape(a0, (NS, SUB, SUB))
    A1 = tl.reshape(a1, (NS, SUB, SUB))
    A2 = tl.reshape(a2, (NS, SUB, SUB))
    A3 = tl.reshape(a3, (NS, SUB, SUB))
    return (_block(A0, blk3, 0), _block(A0, blk3, 1), _block(A1, blk3, 1), _block(A0, blk3, 2), _block(A1, blk3, 2),
            _block(A2, blk3, 2), _block(A0, blk3, 3), _block(A1, blk3, 3), _block(A2, blk3, 3), _block(A3, blk3, 3))


@triton.jit
def _solve_blocks(a00, a10, a11, a20, a21, a22, a30, a31, a32, a33, b0, b1, b2, b3,
                  v_ptr, v_base, t0, T, stride_vt, V, w_ptr, s_base, u_ptr, u_base,
                  BT: tl.constexpr, SUB: tl.constexpr, BK: tl.constexpr, BVP: tl.constexpr,
                  PREP_BK: tl.constexpr, PREP_BV: tl.constexpr, INV_PREC: tl.constexpr, STACK_INV: tl.constexpr,
                  STACK_ST: tl.constexpr):
    """PREP_SOLVE "blocks": W = L^-1 B (B parked in the W buffer) and U0 = L^-1 (beta V) by block
    forward substitution, sub-chunk by sub-chunk."""
    DT: tl.constexpr = w_ptr.dtype.element_ty
    # --- L = I + diag(beta) A, by blocks: inverses of the four diagonal blocks, then block forward
    #     substitution for W = L^-1 B and U0 = L^-1 (beta V) ---
    t00, t11, t22, t33 = _diag_inverses(a00, a11, a22, a33, b0, b1, b2, b3, SUB, INV_PREC, STACK_INV)
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
        _put4(w_ptr, s_base, BK, offs_c, x0, x1, x2, x3, SUB, PREP_BK, STACK_ST)

    for v0 in range(0, BVP, PREP_BV):
        offs_v = v0 + tl.arange(0, PREP_BV)
        r0 = (_tile(v_ptr, v_base, t0, T, stride_vt, offs_v, V, SUB).to(tl.float32) * b0[:, None]).to(DT)
        r1 = (_tile(v_ptr, v_base, t0 + SUB, T, stride_vt, offs_v, V, SUB).to(tl.float32) * b1[:, None]).to(DT)
        r2 = (_tile(v_ptr, v_base, t0 + 2 * SUB, T, stride_vt, offs_v, V, SUB).to(tl.float32) * b2[:, None]).to(DT)
        r3 = (_tile(v_ptr, v_base, t0 + 3 * SUB, T, stride_vt, offs_v, V, SUB).to(tl.float32) * b3[:, None]).to(DT)
        x0, x1, x2, x3 = _solve(t00, t11, t22, t33, n10, n20, n21, n30, n31, n32, r0, r1, r2, r3)
        _put4(u_ptr, u_base, BVP, offs_v, x0, x1, x2, x3, SUB, PREP_BV, STACK_ST)


@triton.jit
def _solve_inverse(a00, a10, a11, a20, a21, a22, a30, a31, a32, a33, b0, b1, b2, b3,
                   v_ptr, v_base, t0, T, stride_vt, V, w_ptr, s_base, u_ptr, u_base, ti_ptr, ti_base,
                   BT: tl.constexpr, SUB: tl.constexpr, BK: tl.constexpr, BVP: tl.constexpr,
                   PREP_BK: tl.constexpr, PREP_BV: tl.constexpr, INV_PREC: tl.constexpr, STACK_INV: tl.constexpr,
                   STACK_ST: tl.constexpr):
    """PREP_SOLVE "inverse": Tb = L^-1 diag(beta) goes through the chunk's BT x BT scratch tile (so
    that it comes back as one tensor-core operand), then W = Tb (exp(G) K), the latter parked in the
    W buffer, and U0 = Tb V, each one BT-row product."""
    DT: tl.constexpr = w_ptr.dtype.element_ty
    cs = tl.arange(0, SUB)
    z = tl.zeros([SUB, SUB], dtype=tl.float32)
    t00, t10, t11, t20, t21, t22, t30, t31, t32, t33 = _inverse_blocks(
        a00, a10, a11, a20, a21, a22, a30, a31, a32, a33, b0, b1, b2, b3, SUB, INV_PREC, DT, STACK_INV)
    # column block J scaled by beta_J: L^-1 diag(beta)
    _put(ti_ptr, ti_base, 0, BT, cs, t00.to(tl.float32) * b0[None, :], SUB)
    _put(ti_ptr, ti_base, 0, BT, SUB + cs, z, SUB)
    _put(ti_ptr, ti_base, 0, BT, 2 * SUB + cs, z, SUB)
    _put(ti_ptr, ti_base, 0, BT, 3 * SUB + cs, z, SUB)
    _put(ti_ptr, ti_base, SUB, BT, cs, t10.to(tl.float32) * b0[None, :], SUB)
    _put(ti_ptr, ti_base, SUB, BT, SUB + cs, t11.to(tl.float32) * b1[None, :], SUB)
    _put(ti_ptr, ti_base, SUB, BT, 2 * SUB + cs, z, SUB)
    _put(ti_ptr, ti_base, SUB, BT, 3 * SUB + cs, z, SUB)
    _put(ti_ptr, ti_base, 2 * SUB, BT, cs, t20.to(tl.float32) * b0[None, :], SUB)
    _put(ti_ptr, ti_base, 2 * SUB, BT, SUB + cs, t21.to(tl.float32) * b1[None, :], SUB)
    _put(ti_ptr, ti_base, 2 * SUB, BT, 2 * SUB + cs, t22.to(tl.float32) * b2[None, :], SUB)
    _put(ti_ptr, ti_base, 2 * SUB, BT, 3 * SUB + cs, z, SUB)
    _put(ti_ptr, ti_base, 3 * SUB, BT, cs, t30.to(tl.float32) * b0[None, :], SUB)
    _put(ti_ptr, ti_base, 3 * SUB, BT, SUB + cs, t31.to(tl.float32) * b1[None, :], SUB)
    _put(ti_ptr, ti_base, 3 * SUB, BT, 2 * SUB + cs, t32.to(tl.float32) * b2[None, :], SUB)
    _put(ti_ptr, ti_base, 3 * SUB, BT, 3 * SUB + cs, t33.to(tl.float32) * b3[None, :], SUB)
    # every thread must see the other threads' stores (this tile's and exp(G) K's) before loading them
    tl.debug_barrier()
    rows = tl.arange(0, BT)
    tb = tl.load(ti_ptr + ti_base + rows[:, None] * BT + rows[None, :])
    for c0 in range(0, BK, PREP_BK):
        offs_c = c0 + tl.arange(0, PREP_BK)
        kg = _tile(w_ptr, s_base, 0, BT, BK, offs_c, BK, BT)
        tl.debug_barrier()  # all loaded before W overwrites them
        _put(w_ptr, s_base, 0, BK, offs_c, tl.dot(tb, kg), BT)
    for v0 in range(0, BVP, PREP_BV):
        offs_v = v0 + tl.arange(0, PREP_BV)
        vv = _tile(v_ptr, v_base, t0, T, stride_vt, offs_v, V, BT).to(DT)
        _put(u_ptr, u_base, 0, BVP, offs_v, tl.dot(tb, vv), BT)


@triton.jit
def _kda_prep(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr,
    w_ptr, u_ptr, qg_ptr, kd_ptr, m_ptr, gl_ptr, ti_ptr,
    T, H, K, V, NT, scale,
    BT: tl.constexpr, SUB: tl.constexpr, BK: tl.constexpr, BVP: tl.constexpr,
    PREP_BK: tl.constexpr, PREP_BV: tl.constexpr, PREP_COLUMNS: tl.constexpr, GLAST_CARRY: tl.constexpr,
    INV_PREC: tl.constexpr, SOLVE_INVERSE: tl.constexpr, STACK_INV: tl.constexpr, STACK_ST: tl.constexpr,
    CENTRE_HALF: tl.constexpr, TOTS: tl.constexpr, KBUFS: tl.constexpr, HEADS_FIRST: tl.constexpr,
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

    if PREP_COLUMNS:
        a00, a10, a11, a20, a21, a22, a30, a31, a32, a33 = _products_columns(
            q_ptr, k_ptr, g_ptr, qk_base, t0, T, H, stride_qt, K, scale, w_ptr, qg_ptr, kd_ptr, s_base,
            m_ptr, m_base, gl_ptr, gl_base, bb, BT, SUB, BK, PREP_BK, not SOLVE_INVERSE)
    else:
        a00, a10, a11, a20, a21, a22, a30, a31, a32, a33 = _products_pairs(
            q_ptr, k_ptr, g_ptr, qk_base, t0, T, stride_qt, K, scale, w_ptr, qg_ptr, kd_ptr, s_base,
            m_ptr, m_base, gl_ptr, gl_base, b0, b1, b2, b3, BT, SUB, BK, PREP_BK, GLAST_CARRY, not SOLVE_INVERSE,
            STACK_ST, CENTRE_HALF, TOTS)

    if SOLVE_INVERSE:
        _solve_inverse(a00, a10, a11, a20, a21, a22, a30, a31, a32, a33, b0, b1, b2, b3,
                       v_ptr, v_base, t0, T, stride_vt, V, w_ptr, s_base, u_ptr, bh.to(tl.int64) * TP * BVP + t0 * BVP,
                       ti_ptr, m_base, BT, SUB, BK, BVP, PREP_BK, PREP_BV, INV_PREC, STACK_INV, STACK_ST)
    else:
        _solve_blocks(a00, a10, a11, a20, a21, a22, a30, a31, a32, a33, b0, b1, b2, b3,
                      v_ptr, v_base, t0, T, stride_vt, V, w_ptr, s_base, u_ptr, bh.to(tl.int64) * TP * BVP + t0 * BVP,
                      BT, SUB, BK, BVP, PREP_BK, PREP_BV, INV_PREC, STACK_INV, STACK_ST)


# NT is not specialized: Triton's launcher makes an integer argument equal to 1 a constant, and the
# scan compiled for NT == 1 (SCAN_BV 32, 4 warps, bf16) gave wrong output rows 16-63 on the H200
# (one chunk, T = 17..64: rel err 0.26 to 1.25; NT >= 2, fp32 and the 8-warp scan were right;
# kernels/problems/kda/NOTES.md, "one-chunk sequences").
# Unspecialized, one compile serves every NT; its sm_90 SASS is the one the headline shapes ran before
# (NT marked divisible by 16 or not: the same instructions, kda_scan_sm90_resources.json @238725e).
@triton.jit(do_not_specialize=["NT"])
def _kda_scan(
    w_ptr, u_ptr, qg_ptr, kd_ptr, m_ptr, gl_ptr, o_ptr,
    T, H, V, NT,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVP: tl.constexpr, USE_PDL: tl.constexpr,
    WQ: tl.constexpr,
):
    """Chunk after chunk: U = U0 - W S;  O = Qg S + M U;  S = exp(G_last) * S + Kd^T U.
    WQ (SCAN_WQ): W, Qg and Kd interleaved per chunk, W S and Qg S as one product."""
    if USE_PDL:  # launched early: wait until the preparation has finished and its writes are visible
        tl.extra.cuda.gdc_wait()
    bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    b = bh // H
    h = bh % H
    DT: tl.constexpr = w_ptr.dtype.element_ty
    rows = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = pid_v * BV + tl.arange(0, BV)
    TP = NT * BT
    KBUFS: tl.constexpr = 3 if WQ else 1
    k_base = bh.to(tl.int64) * TP * (KBUFS * BK)
    u_base = bh.to(tl.int64) * TP * BVP
    m_base = bh.to(tl.int64) * TP * BT
    o_base = (b.to(tl.int64) * T * H + h) * V
    S = tl.zeros([BK, BV], dtype=tl.float32)
    for n in range(NT):
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
        # slower on the H200: 227 against 178 us, kda_forms_tune.json @32a721a)
        S = tl.dot(tl.trans(kd), u, acc=S * gl[:, None])


def kda(q, k, v, g, beta, scale):
    B, T, H, K = q.shape
    V = v.shape[-1]
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    BT = CONFIG["CHUNK"]
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
    inverse = CONFIG["PREP_SOLVE"] == "inverse"
    # PREP_SOLVE "inverse": each chunk's L^-1 diag(beta) passes through this scratch (not read by the scan)
    ti = torch.empty((B * H, TP, BT), device=dev, dtype=dt) if inverse else m
    pdl = bool(CONFIG["SCAN_PDL"]) and q.is_cuda
    heads_first = CONFIG["PREP_ORDER"] == "heads"
    _kda_prep[(B * H, NT) if heads_first else (NT, B * H)](
        q, k, v, g, beta, w, u0, qg, kd, m, gl, ti, T, H, K, V, NT, scale,
        BT=BT, SUB=SUB, BK=BK, BVP=BVP, PREP_BK=min(BK, CONFIG["PREP_BK"]), PREP_BV=min(BVP, CONFIG["PREP_BV"]),
        PREP_COLUMNS=CONFIG["PREP_FORM"] == "columns", GLAST_CARRY=CONFIG["PREP_GLAST"] == "carry",
        INV_PREC=CONFIG["PREP_INV"], SOLVE_INVERSE=inverse,
        STACK_INV=CONFIG["PREP_STACK"] in ("inverses", "all"), STACK_ST=CONFIG["PREP_STACK"] in ("stores", "all"),
        CENTRE_HALF=CONFIG["PREP_CENTRE"] in ("half", "half_tots"),
        TOTS=CONFIG["PREP_CENTRE"] == "half_tots" and CONFIG["PREP_GLAST"] == "load", KBUFS=3 if wq else 1,
        HEADS_FIRST=heads_first, USE_PDL=pdl, num_warps=CONFIG["PREP_WARPS"],
        **({"maxnreg": CONFIG["PREP_MAXNREG"]} if CONFIG["PREP_MAXNREG"] else {}),
    )
    many = "_MANY" if B * H >= CONFIG["MANY_HEADS"] else ""
    BV = min(BVP, CONFIG["SCAN_BV" + many])
    _kda_scan[(B * H, BVP // BV)](
        w, u0, qg, kd, m, gl, o, T, H, V, NT,
        BT=BT, BK=BK, BV=BV, BVP=BVP, USE_PDL=pdl, WQ=wq, num_warps=CONFIG["SCAN_WARPS" + many],
        num_stages=CONFIG["SCAN_STAGES" + many],
        **({"launch_pdl": True} if pdl else {}),  # a launch option of the NVIDIA backend only
    )
    return o
