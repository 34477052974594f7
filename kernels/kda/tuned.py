"""KDA forward, chunked: a chunk-parallel preparation kernel, then a sequential scan across chunks.

The math is `kda_chunked_torch` in baselines.py. Per batch and head, tokens are cut into chunks of
BT = 64; with G the within-chunk inclusive cumulative gate (G <= 0, decreasing down the chunk), S
the state entering the chunk and `scale` folded into the query side:

    A[i,j] = sum_c k_ic k_jc exp(G_ic - G_jc)   (j < i)      M[i,j] = scale * same with q_i   (j <= i)
    L = I + diag(beta) A,   T = L^-1                            (unit lower triangular)
    W = T diag(beta) (exp(G) * K),   U0 = T diag(beta) V         (the WY / UT form)
    U = U0 - W S                        (the delta rule's corrected values)
    O = scale (exp(G) * Q) S + M U  =  Q' S + O0,   Q' = scale exp(G) * Q - M W,   O0 = M U0
    S <- exp(G_last) * S + (exp(G_last - G) * K)^T U

Everything that does not involve S (A, M, T, W, U0, Q', O0 and the decayed keys) is independent
across chunks: `_kda_prep` computes it with one program per (chunk, batch*head). What is left per
chunk is three tensor-core products, which `_kda_scan` runs chunk after chunk with a K x BV slice of
the state in fp32 registers, writing O as it goes (one program per (batch*head, block of V
columns): value columns of the state evolve independently, so splitting V is exact).

Numerics: exp(G_i - G_j) cannot be split as exp(G_i) * exp(-G_j): over a chunk G falls as low as
64 * (-5) = -320, and exp(320) overflows fp32. The preparation instead splits each pair (i, j) at a
reference row r between them, exp(G_i - G_r) * exp(G_r - G_j), both factors <= 1, in three levels
that together cover the lower triangle, each a full 64 x 64 tensor-core product:
  1. rows 32..63 against rows 0..31, r = 32 (the chunk's middle);
  2. rows 16..31 against 0..15 and rows 48..63 against 32..47, r = 16 and 48;
  3. inside each 16-row sub-chunk, r = its middle row: there i and j may sit on the same side of r,
     so a factor can exceed 1, but by at most exp(8 * max|g|) = e^40 for the problem's g >= -5
     (finite for any g > -11); what such a product contributes above the diagonal is masked out.
A factor that underflows to zero stands for a true value below ~1e-38.

Dtypes: on the GPU the intermediates and tensor-core operands are bf16 with fp32 accumulation; the
state, gates and exponentials are fp32, and the triangular solve runs on fp32 operands (tf32x3 on
the tensor cores by default). For fp16/fp32 inputs (the CPU interpreter, where tl.dot on bf16 is not
usable) everything runs in fp32."""
import torch
import triton
import triton.language as tl

# knobs a tuner may turn (kernels/tunables.py); the launcher reads CONFIG.
# CHUNK is 64 only: the preparation's reference rows (the three levels above) are written for it.
TUNABLES = {
    "CHUNK": (64,),
    "PREP_BK": (32, 64, 128),  # channels per step of the preparation (fewer: fewer live registers)
    "PREP_BV": (32, 64, 128),  # value columns per step of its U0 = T (beta V), O0 = M U0
    "PREP_WARPS": (4, 8),
    "SOLVE_PRECISION": ("tf32", "tf32x3", "ieee"),  # of the 64 x 64 fp32 products of the solve
    # the scan: V columns of the state per program, warps, and how many chunks ahead its loads run;
    # one set for few batch*heads (V split finely, to spread over the SMs) and one for many
    "MANY_HEADS": (64, 128, 256),  # batch*heads from which the _MANY set applies
    "SCAN_BV": (16, 32, 64, 128),
    "SCAN_WARPS": (4, 8),
    "SCAN_STAGES": (2, 3, 4),
    "SCAN_BV_MANY": (16, 32, 64, 128),
    "SCAN_WARPS_MANY": (4, 8),
    "SCAN_STAGES_MANY": (2, 3, 4),
}
CONFIG = {"CHUNK": 64, "PREP_BK": 32, "PREP_BV": 128, "PREP_WARPS": 8, "SOLVE_PRECISION": "tf32",
          "MANY_HEADS": 128, "SCAN_BV": 16, "SCAN_WARPS": 4, "SCAN_STAGES": 3,
          "SCAN_BV_MANY": 64, "SCAN_WARPS_MANY": 8, "SCAN_STAGES_MANY": 2}


@triton.jit
def _tile(ptr, base, row0, nrows, stride_r, cols, ncols, ROWS: tl.constexpr):
    """Rows row0 .. row0+ROWS of a row-major [nrows, stride_r] view, zero past nrows and ncols."""
    rows = row0 + tl.arange(0, ROWS)
    mask = (rows < nrows)[:, None] & (cols < ncols)[None, :]
    return tl.load(ptr + base + rows[:, None].to(tl.int64) * stride_r + cols[None, :], mask=mask, other=0.0)


@triton.jit
def _put(ptr, base, stride_r, cols, tile, ROWS: tl.constexpr):
    """Store a ROWS-row tile into a padded scratch buffer (every element written, no masks)."""
    rows = tl.arange(0, ROWS)
    tl.store(ptr + base + rows[:, None].to(tl.int64) * stride_r + cols[None, :], tile.to(ptr.dtype.element_ty))


@triton.jit
def _at(G, rows, r):
    """Row r of a tile, as a vector over its columns."""
    return tl.sum(tl.where(rows[:, None] == r, G, 0.0), axis=0)


@triton.jit
def _by_block(rows, v0, v1, v2, v3):
    """A tile whose rows in 16-row block b hold vector v_b."""
    blk = rows[:, None] // 16
    return tl.where(blk == 0, v0[None, :], tl.where(blk == 1, v1[None, :], tl.where(blk == 2, v2[None, :],
                                                                                   v3[None, :])))


@triton.jit
def _level(k, q, G, R, lhs, A, M, mask, DT: tl.constexpr):
    """One level of the intra-chunk products: rows with lhs set pair with rows without it, through
    the reference gates R (a tile), exp(G_i - R_i) * exp(R_j - G_j), both exponents <= 0 (G falls
    down the chunk). Adds the products to A and M where `mask` keeps them."""
    P = tl.exp(tl.where(lhs, G - R, R - G))
    kP = k * P
    rk = tl.trans(tl.where(lhs, 0.0, kP).to(DT))
    a = tl.dot(tl.where(lhs, kP, 0.0).to(DT), rk)
    m = tl.dot(tl.where(lhs, q * P, 0.0).to(DT), rk)
    return A + tl.where(mask, a, 0.0), M + tl.where(mask, m, 0.0)


@triton.jit
def _mm(a, b, PREC: tl.constexpr):
    return tl.dot(a, b, input_precision=PREC)


@triton.jit
def _kda_prep(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr,
    w_ptr, u_ptr, qp_ptr, kd_ptr, o0_ptr, gl_ptr,
    T, H, K, V, NT, scale,
    BT: tl.constexpr, BK: tl.constexpr, BVP: tl.constexpr, PREP_BK: tl.constexpr, PREP_BV: tl.constexpr,
    PREC: tl.constexpr,
):
    n = tl.program_id(0)  # chunk
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    DT: tl.constexpr = w_ptr.dtype.element_ty
    t0 = n * BT
    stride_qt = H * K
    stride_vt = H * V
    qk_base = (b.to(tl.int64) * T * H + h) * K + t0.to(tl.int64) * stride_qt
    v_base = (b.to(tl.int64) * T * H + h) * V + t0.to(tl.int64) * stride_vt
    TP = NT * BT
    s_base = (bh.to(tl.int64) * TP + t0) * BK  # this chunk in the [BH, TP, BK] buffers
    u_base = (bh.to(tl.int64) * TP + t0) * BVP  # and in the [BH, TP, BVP] ones
    gl_base = (bh.to(tl.int64) * NT + n) * BK
    nrows = T - t0  # valid rows of this chunk
    rows = tl.arange(0, BT)
    beta = tl.load(beta_ptr + b.to(tl.int64) * T * H + h + (t0 + rows).to(tl.int64) * H,
                   mask=rows < nrows, other=0.0).to(tl.float32)

    # --- phase 1, PREP_BK channels at a time (gates are per channel, so channels are independent up
    #     to the sums over them): the gates, the three levels of A and M, and the per-row outputs ---
    up = (rows >= 32)[:, None]  # level 1: rows 32..63 against rows 0..31
    hi = (rows % 32 >= 16)[:, None]  # level 2: rows 16..31 against 0..15, 48..63 against 32..47
    same_half = (rows[:, None] // 32) == (rows[None, :] // 32)
    same_block = (rows[:, None] // 16) == (rows[None, :] // 16)
    A = tl.zeros([BT, BT], dtype=tl.float32)
    M = tl.zeros([BT, BT], dtype=tl.float32)
    for c0 in range(0, BK, PREP_BK):
        cols = c0 + tl.arange(0, PREP_BK)
        g = _tile(g_ptr, qk_base, 0, nrows, stride_qt, cols, K, BT).to(tl.float32)  # 0 past T: G stays flat
        k = _tile(k_ptr, qk_base, 0, nrows, stride_qt, cols, K, BT).to(tl.float32)
        q = _tile(q_ptr, qk_base, 0, nrows, stride_qt, cols, K, BT).to(tl.float32)
        G = tl.cumsum(g, axis=0)
        glast = tl.sum(g, axis=0)
        tl.store(gl_ptr + gl_base + cols, tl.exp(glast))
        g8, g24, g40, g56 = _at(G, rows, 8), _at(G, rows, 24), _at(G, rows, 40), _at(G, rows, 56)
        g16, g32, g48 = _at(G, rows, 16), _at(G, rows, 32), _at(G, rows, 48)
        A, M = _level(k, q, G, g32[None, :], up, A, M, up & (rows[None, :] < 32), DT)
        A, M = _level(k, q, G, tl.where(up, g48[None, :], g16[None, :]), hi, A, M, same_half, DT)
        # level 3: every row on both sides, re-centred at its sub-chunk's middle row
        Gm = _by_block(rows, g8, g24, g40, g56)
        E = tl.exp(G - Gm)  # <= e^(8 max|g|)
        kE = k * E
        X = k * tl.exp(Gm - G)
        xt = tl.trans(X.to(DT))
        a = tl.dot(kE.to(DT), xt)
        m = tl.dot((q * E).to(DT), xt)
        A += tl.where(same_block & (rows[:, None] > rows[None, :]), a, 0.0)
        M += tl.where(same_block & (rows[:, None] >= rows[None, :]), m, 0.0)
        # per-row outputs, with exp(G) = E exp(Gm) and exp(G_last - G) = X/k exp(G_last - Gm): only
        # vectors are exponentiated again. The gated queries and beta exp(G) K wait in the Q' and
        # W buffers for the solve.
        eGm = _by_block(rows, tl.exp(g8), tl.exp(g24), tl.exp(g40), tl.exp(g56))
        eLm = _by_block(rows, tl.exp(glast - g8), tl.exp(glast - g24), tl.exp(glast - g40), tl.exp(glast - g56))
        _put(kd_ptr, s_base, BK, cols, X * eLm, BT)
        _put(qp_ptr, s_base, BK, cols, q * E * eGm * scale, BT)
        _put(w_ptr, s_base, BK, cols, kE * eGm * beta[:, None], BT)

    # --- phase 2: T = (I + N)^-1, N = diag(beta) A. With Nd its 16 x 16 diagonal blocks (Nd^16 = 0)
    #     and No the rest: (I + Nd)^-1 = (I - Nd)(I + Nd^2)(I + Nd^4)(I + Nd^8) =: D, then with
    #     P = D No (strictly block-lower, P^4 = 0): T = (I + P)^-1 D = (I - P)(I + P^2) D ---
    M = tl.where(rows[:, None] >= rows[None, :], M, 0.0) * scale
    N = A * beta[:, None]
    eye = (rows[:, None] == rows[None, :]).to(tl.float32)
    Nd = tl.where(same_block, N, 0.0)
    n2 = _mm(Nd, Nd, PREC)  # in this order, few 64 x 64 tiles are live at a time
    D = _mm(eye - Nd, eye + n2, PREC)
    n4 = _mm(n2, n2, PREC)
    D = _mm(D, eye + n4, PREC)
    D = _mm(D, eye + _mm(n4, n4, PREC), PREC)
    P = _mm(D, tl.where(same_block, 0.0, N), PREC)
    Tm = _mm(_mm(eye - P, eye + _mm(P, P, PREC), PREC), D, PREC).to(DT)
    Md = M.to(DT)

    # --- phase 3: W = T (beta exp(G) K) and Q' = scale exp(G) Q - M W over the parked tiles;
    #     U0 = T (beta V) and O0 = M U0. Every thread must see the others' parked stores before
    #     loading them, and all must have loaded a tile before it is overwritten ---
    tl.debug_barrier()
    for c0 in range(0, BK, PREP_BK):
        cols = c0 + tl.arange(0, PREP_BK)
        bk = _tile(w_ptr, s_base, 0, BT, BK, cols, BK, BT)
        qs = _tile(qp_ptr, s_base, 0, BT, BK, cols, BK, BT).to(tl.float32)
        tl.debug_barrier()
        w = tl.dot(Tm, bk).to(DT)
        _put(w_ptr, s_base, BK, cols, w, BT)
        _put(qp_ptr, s_base, BK, cols, qs - tl.dot(Md, w), BT)
    for v0 in range(0, BVP, PREP_BV):
        cols = v0 + tl.arange(0, PREP_BV)
        bv = (_tile(v_ptr, v_base, 0, nrows, stride_vt, cols, V, BT).to(tl.float32) * beta[:, None]).to(DT)
        u0 = tl.dot(Tm, bv).to(DT)
        _put(u_ptr, u_base, BVP, cols, u0, BT)
        _put(o0_ptr, u_base, BVP, cols, tl.dot(Md, u0), BT)


@triton.jit
def _kda_scan(
    w_ptr, u_ptr, qp_ptr, kd_ptr, o0_ptr, gl_ptr, o_ptr,
    T, H, V, NT,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVP: tl.constexpr,
):
    """Chunk after chunk: U = U0 - W S;  O = Q' S + O0;  S = exp(G_last) * S + Kd^T U."""
    bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    b = bh // H
    h = bh % H
    DT: tl.constexpr = w_ptr.dtype.element_ty
    rows = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = pid_v * BV + tl.arange(0, BV)
    TP = NT * BT
    k_base = bh.to(tl.int64) * TP * BK
    u_base = bh.to(tl.int64) * TP * BVP
    o_base = (b.to(tl.int64) * T * H + h) * V
    S = tl.zeros([BK, BV], dtype=tl.float32)
    for n in range(NT):
        r = n * BT + rows
        kk = k_base + r[:, None] * BK + offs_k[None, :]
        uu = u_base + r[:, None] * BVP + offs_v[None, :]
        w = tl.load(w_ptr + kk)
        qp = tl.load(qp_ptr + kk)
        kd = tl.load(kd_ptr + kk)
        u0 = tl.load(u_ptr + uu).to(tl.float32)
        o0 = tl.load(o0_ptr + uu).to(tl.float32)
        gl = tl.load(gl_ptr + (bh.to(tl.int64) * NT + n) * BK + offs_k)
        s = S.to(DT)
        u = (u0 - tl.dot(w, s)).to(DT)
        o = tl.dot(qp, s, acc=o0)
        tl.store(o_ptr + o_base + r[:, None].to(tl.int64) * (H * V) + offs_v[None, :],
                 o.to(o_ptr.dtype.element_ty), mask=(r < T)[:, None] & (offs_v < V)[None, :])
        S = tl.dot(tl.trans(kd), u, acc=S * gl[:, None])


def kda(q, k, v, g, beta, scale):
    B, T, H, K = q.shape
    V = v.shape[-1]
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    BT = CONFIG["CHUNK"]
    NT = triton.cdiv(T, BT)
    TP = NT * BT
    BK = max(16, triton.next_power_of_2(K))
    BVP = max(16, triton.next_power_of_2(V))
    # bf16 tensor-core operands on the GPU; fp32 elsewhere (the interpreter cannot dot bf16)
    dt = torch.bfloat16 if v.dtype == torch.bfloat16 else torch.float32
    dev = q.device
    # per-chunk intermediates, padded to whole chunks and power-of-two widths: the preparation
    # writes every element (zeros past T), so the scan loads them without masks
    w = torch.empty((B * H, TP, BK), device=dev, dtype=dt)
    qp = torch.empty((B * H, TP, BK), device=dev, dtype=dt)
    kd = torch.empty((B * H, TP, BK), device=dev, dtype=dt)
    u0 = torch.empty((B * H, TP, BVP), device=dev, dtype=dt)
    o0 = torch.empty((B * H, TP, BVP), device=dev, dtype=dt)
    gl = torch.empty((B * H, NT, BK), device=dev, dtype=torch.float32)
    o = torch.empty((B, T, H, V), device=dev, dtype=v.dtype)
    _kda_prep[(NT, B * H)](
        q, k, v, g, beta, w, u0, qp, kd, o0, gl, T, H, K, V, NT, scale,
        BT=BT, BK=BK, BVP=BVP, PREP_BK=min(BK, CONFIG["PREP_BK"]), PREP_BV=min(BVP, CONFIG["PREP_BV"]),
        PREC=CONFIG["SOLVE_PRECISION"], num_warps=CONFIG["PREP_WARPS"],
    )
    many = "_MANY" if B * H >= CONFIG["MANY_HEADS"] else ""
    BV = min(BVP, CONFIG["SCAN_BV" + many])
    _kda_scan[(B * H, BVP // BV)](
        w, u0, qp, kd, o0, gl, o, T, H, V, NT,
        BT=BT, BK=BK, BV=BV, BVP=BVP, num_warps=CONFIG["SCAN_WARPS" + many],
        num_stages=CONFIG["SCAN_STAGES" + many],
    )
    return o
