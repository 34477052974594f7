"""MLA decode, tuned: a two-kernel split-KV pipeline that reads the latent cache once for all heads.

Stage 1 (`_mla_split_kernel`): the grid is (head block, split, batch). A program takes a block of
BLOCK_H heads of one sequence and one contiguous slice ("split") of that sequence's cache. It streams
the slice in tiles of BLOCK_N rows. Each 576-wide row is the key (latent 512 | rope 64) and its first
512 columns are the value, so one load serves both tensor-core products:

    scores [BLOCK_H, BLOCK_N] = q_lat @ c^T + q_rope @ r^T        (c: the tile's latent part, r: rope)
    acc    [BLOCK_H, 512]    += softmax-weights @ c                (online softmax across tiles)

It writes the split's normalised output and its log-sum-exp (fp32) to a workspace. Heads are the M
dimension of both products, so they are padded to at least 16 (64 gives Hopper's wgmma). A program
may ask L2 for the tiles it will load a few iterations later (PREFETCH): Triton 3.6's two-stage
pipeline issues a tile's copy only at the end of the iteration before the one that uses it, and that
iteration begins by waiting for it, so the copy overlaps little of the products; the hint starts the
DRAM read earlier.

The workspace is one fp32 buffer: partial outputs [B, H, splits, 512] (fp32, or in the input's dtype:
WORKSPACE "input"; a normalised output is a convex combination of value rows, so it fits that dtype's
range), then log-sum-exps [B, H, splits] in fp32. Every tensor is contiguous, so the kernels derive
their strides from B, H, S and the split count: a launch with few arguments and one allocation costs
less host time, which at B=1 (a few microseconds of GPU work) is what an eager call mostly waits for.

Stage 2 (`_mla_merge_kernel`) combines the splits of each (batch, head) in one pass, chunk by chunk
of splits (one chunk when they fit), with a running maximum:
    o = sum_i exp(lse_i - lse_max) * o_i / sum_i exp(lse_i - lse_max).
With a single split stage 1 writes the final output itself and stage 2 is not launched.

Softmax runs in base 2: scale * log2(e) is folded into the scores once, so exp2 is the only
transcendental in the inner loop and every lse in the workspace is a base-2 log.
"""
import torch
import triton
import triton.language as tl

# Knobs a tuner may turn (kernels/problems/tunables.py); the launcher reads CONFIG. Two regimes, because the
# best tiles differ: "small" (B * ceil(H / 64) < SMALL_BELOW, e.g. B=1: a few microseconds of work,
# where latency and the workspace decide) reads the SMALL_* keys; otherwise (e.g. B=32, H=128: tensor
# cores busy) the plain keys. Small head blocks read each cache slice once per block (from L2), so
# with 64 heads or more and a large cache the small regime gives way to the plain tiles even at B=1:
#   SMALL_WORK_BELOW  B * H * S under which the small regime holds at H >= 64
#   BLOCK_H      heads per program (the M of both products; clamped to the padded head count)
#   BLOCK_N      cache rows per inner-loop tile
#   num_warps, num_stages: stage 1's warps and software-pipelining depth
#   SPLIT_WAVES  auto splits: aim at this many stage-1 programs per multiprocessor
#   NUM_SPLITS   "auto" (from SPLIT_WAVES) or a fixed split count, both regimes
#   MIN_SPLIT    auto splits: fewest cache rows a split may have (keeps the workspace small)
#   PREFETCH     ask L2 for the tile this many tiles ahead of the one being computed (0: off; CUDA only)
#   WORKSPACE    the partial outputs' dtype: "fp32", or "input" (half the bytes for bf16 inputs)
#   MERGE_BLOCK_D, MERGE_WARPS: the merge kernel's output columns per program and warps
#   PDL          launch the merge as a programmatic dependent launch (Hopper): its programs start
#                while stage 1 finishes and wait in griddepcontrol.wait, hiding one launch latency
#   FORM         stage 1's products: "heads" as their M dimension, or "tokens" (transposed: cache rows
#                as M, so that wgmma serves any head block; wants BLOCK_N a multiple of 64). "tokens"
#                runs with at least 2 stages: with 1 (Triton 3.6, H200) it gave wrong results or an
#                illegal memory access
TUNABLES = {
    "BLOCK_H": (16, 32, 64),
    "BLOCK_N": (16, 32, 64, 128),
    "num_warps": (4, 8),
    "num_stages": (1, 2, 3, 4),
    "SPLIT_WAVES": (0.25, 0.5, 1, 2, 4),
    "SMALL_BELOW": (0, 2, 4, 8, 16, 32, 64, 128),
    "SMALL_WORK_BELOW": (0, 524288, 2097152, 8388608, 33554432, 134217728, 536870912),
    "SMALL_BLOCK_H": (16, 32, 64),
    "SMALL_BLOCK_N": (16, 32, 64, 128),
    "SMALL_num_warps": (4, 8),
    "SMALL_num_stages": (1, 2, 3, 4),
    "SMALL_SPLIT_WAVES": (0.25, 0.5, 1, 2, 4),
    "NUM_SPLITS": ("auto", 1, 2, 4, 8, 16, 32, 64, 128),
    "MIN_SPLIT": (32, 64, 128, 256, 512),
    "MERGE_BLOCK_D": (64, 128, 256, 512),
    "MERGE_WARPS": (1, 2, 4, 8),
    "PDL": (False, True),
    "FORM": ("heads", "tokens"),
    "SMALL_FORM": ("heads", "tokens"),
    "PREFETCH": (0, 1, 2, 3, 4),
    "SMALL_PREFETCH": (0, 1, 2, 3, 4),
    "WORKSPACE": ("fp32", "input"),
    "SMALL_WORKSPACE": ("fp32", "input"),
}
# Stage-1 tiles picked on an H200 by `python bench/mla_decode.py tune` (mla_decode_tune.json @7677c6f):
# CUDA-graph time after an L2 flush. A later tune with FORM (mla_decode_tune.json @bb2fa31) found the
# best "tokens" stage 1 within 0.4 us of these tiles at B=1: not worth changing.
# The plan rule (SMALL_BELOW, SMALL_WORK_BELOW) and the regimes' PREFETCH and WORKSPACE from `python
# bench/mla_decode.py pick` (mla_decode_pick.json in bench/results/h200/): of the rules and regime
# variants timed on the 27 regime shapes, this one beat torch.compile's recorded times on the most
# shapes (19 by 3 % or more). PREFETCH 2 in the large regime: B=32, H=128, S=8192 255.1 against
# 273.2 us without. The input-dtype workspace, alone or with the prefetch in the small regime, was
# slower on most shapes (NOTES.md).
CONFIG = {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "SPLIT_WAVES": 1,
          "SMALL_BELOW": 64, "SMALL_WORK_BELOW": 2097152, "SMALL_BLOCK_H": 16, "SMALL_BLOCK_N": 32,
          "SMALL_num_warps": 4, "SMALL_num_stages": 3, "SMALL_SPLIT_WAVES": 1, "NUM_SPLITS": "auto", "MIN_SPLIT": 64,
          "MERGE_BLOCK_D": 256, "MERGE_WARPS": 4, "PDL": True, "FORM": "heads", "SMALL_FORM": "heads",
          "PREFETCH": 2, "SMALL_PREFETCH": 0, "WORKSPACE": "fp32", "SMALL_WORKSPACE": "fp32"}

D_LATENT = 512
LOG2E = 1.4426950408889634
# The split heuristic's multiprocessor count: the H100 and H200 (SXM) have 132. A constant rather than
# a device query, to keep the host path short; SPLIT_WAVES scales it for other parts.
NUM_SMS = 132
# the merge's chunk of splits times its output columns, at most: 64 fp32 registers a thread at 4 warps
MERGE_TILE = 8192


@triton.jit
def _prefetch_rows(kv_ptr, row0, row_end, BLOCK_N: tl.constexpr, D_LAT: tl.constexpr, D_ROPE: tl.constexpr):
    """Ask L2 for cache rows [row0, min(row0 + BLOCK_N, row_end)) (absolute rows, row0 < row_end): one
    prefetch per 128-byte line, rows past the end clamped to the last. A hint: nothing waits on it."""
    LINE: tl.constexpr = 1024 // kv_ptr.dtype.element_ty.primitive_bitwidth  # elements per 128 bytes
    D_QK: tl.constexpr = D_LAT + D_ROPE
    ROPE_LINES: tl.constexpr = (D_ROPE + LINE - 1) // LINE
    rows = tl.minimum(row0 + tl.arange(0, BLOCK_N), row_end - 1).to(tl.int64) * D_QK
    lat = kv_ptr + rows[:, None] + tl.arange(0, D_LAT // LINE)[None, :] * LINE
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [lat],
                              dtype=tl.int32, is_pure=False, pack=1)
    rope = kv_ptr + rows[:, None] + D_LAT + tl.arange(0, ROPE_LINES)[None, :] * LINE
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [rope],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _mla_split_kernel(
    q_ptr, kv_ptr, ws_ptr, o_ptr,
    B, H, S, split_len, n_splits, qk_scale,  # qk_scale = scale * log2(e)
    D_LAT: tl.constexpr, D_ROPE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr,  # one split: write the final output, skip the workspace
    TOKENS_M: tl.constexpr,  # FORM "tokens": the products transposed (see below)
    USE_PDL: tl.constexpr,
    PREFETCH: tl.constexpr,  # tiles ahead to ask L2 for (0: none)
    WS_INPUT: tl.constexpr,  # partial outputs in the input's dtype instead of fp32
):
    """FORM "heads" (TOKENS_M false): heads are the products' M dimension,

        scores [BLOCK_H, BLOCK_N] = q_lat @ c^T + q_rope @ r^T,   acc [BLOCK_H, 512] += p @ c

    FORM "tokens": cache rows are M, so both products run as Hopper wgmma (M a multiple of 64)
    however few heads a program takes (with heads as M, 16 heads get only mma.sync, a chain of 36
    dependent MMAs over the 576 columns per tile):

        scores^T [BLOCK_N, BLOCK_H] = c @ q_lat^T + r @ q_rope^T, acc^T [512, BLOCK_H] += c^T @ p^T"""
    if USE_PDL:  # let the merge grid launch once every program here has started
        tl.extra.cuda.gdc_launch_dependents()
    D_QK: tl.constexpr = D_LAT + D_ROPE
    # head block fastest: programs launched together share (batch, split) and so the same cache
    # slice, which the second and later head blocks then find in L2
    hb = tl.program_id(0)
    split = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)  # 64-bit: B * S * 576 may pass 2^31 elements

    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = offs_h < H
    offs_c = tl.arange(0, D_LAT)
    offs_r = tl.arange(0, D_ROPE)

    # the query block stays resident for the whole slice; padded heads read zeros (finite scores)
    if TOKENS_M:  # loaded transposed, [columns, heads]: the B operand of the score product
        q_cols = q_ptr + (b * H + offs_h[None, :]) * D_QK
        q_lat = tl.load(q_cols + offs_c[:, None], mask=h_ok[None, :], other=0.0)
        q_rope = tl.load(q_cols + D_LAT + offs_r[:, None], mask=h_ok[None, :], other=0.0)
        acc = tl.zeros([D_LAT, BLOCK_H], dtype=tl.float32)  # running numerator, transposed
    else:
        q_rows = q_ptr + (b * H + offs_h[:, None]) * D_QK
        q_lat = tl.load(q_rows + offs_c[None, :], mask=h_ok[:, None], other=0.0)
        q_rope = tl.load(q_rows + D_LAT + offs_r[None, :], mask=h_ok[:, None], other=0.0)
        acc = tl.zeros([BLOCK_H, D_LAT], dtype=tl.float32)  # running numerator

    start = split * split_len
    end = tl.minimum(start + split_len, S)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)  # running max (base-2 units)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)  # running denominator
    # the tile's first row moves as a 64-bit pointer (S * 576 may pass 2^31); rows within it are 32-bit
    kv_tile = kv_ptr + (b * S + start) * D_QK
    offs_t = tl.arange(0, BLOCK_N)
    if PREFETCH > 0:  # the tiles after the first, up to the one the loop's first iteration asks for
        for ahead in tl.static_range(1, PREFETCH):
            if start + ahead * BLOCK_N < end:
                _prefetch_rows(kv_ptr, b * S + start + ahead * BLOCK_N, b * S + end, BLOCK_N, D_LAT, D_ROPE)
    for n0 in range(start, end, BLOCK_N):
        if PREFETCH > 0:
            if n0 + PREFETCH * BLOCK_N < end:
                _prefetch_rows(kv_ptr, b * S + n0 + PREFETCH * BLOCK_N, b * S + end, BLOCK_N, D_LAT, D_ROPE)
        n_ok = n0 + offs_t < end
        kv_rows = kv_tile + offs_t[:, None] * D_QK
        c = tl.load(kv_rows + offs_c[None, :], mask=n_ok[:, None], other=0.0)  # [BLOCK_N, 512]: K and V
        r = tl.load(kv_rows + D_LAT + offs_r[None, :], mask=n_ok[:, None], other=0.0)  # [BLOCK_N, 64]

        # the first tile of a non-empty split always has a valid row, so m_new is finite from here
        if TOKENS_M:
            s = tl.dot(r, q_rope, acc=tl.dot(c, q_lat))
            s = tl.where(n_ok[:, None], s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=0))
            alpha = tl.math.exp2(m_i - m_new)
            p = tl.math.exp2(s - m_new[None, :])
            l_i = l_i * alpha + tl.sum(p, axis=0)
            acc = tl.dot(tl.trans(c), p.to(c.dtype), acc=acc * alpha[None, :])  # the latent tile as V
        else:
            s = tl.dot(q_rope, tl.trans(r), acc=tl.dot(q_lat, tl.trans(c)))
            s = tl.where(n_ok[None, :], s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.math.exp2(m_i - m_new)
            p = tl.math.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = tl.dot(p.to(c.dtype), c, acc=acc * alpha[:, None])  # the same latent tile, now as V
        m_i = m_new
        kv_tile += BLOCK_N * D_QK

    if TOKENS_M:
        acc = tl.trans(acc)
    # an empty split (only when a fixed NUM_SPLITS outnumbers the rows) has l = 0: lse -inf, o 0
    has_rows = l_i > 0.0
    out = acc / tl.where(has_rows, l_i, 1.0)[:, None]
    if SINGLE_SPLIT:
        o_rows = o_ptr + (b * H + offs_h[:, None]) * D_LAT
        tl.store(o_rows + offs_c[None, :], out.to(o_ptr.dtype.element_ty), mask=h_ok[:, None])
    else:
        lse = tl.where(has_rows, m_i + tl.math.log2(tl.where(has_rows, l_i, 1.0)), float("-inf"))
        row = (b * H + offs_h) * n_splits + split  # (batch, head, split) in the workspace
        if WS_INPUT:
            part_ptr = ws_ptr.to(tl.pointer_type(o_ptr.dtype.element_ty), bitcast=True)
            tl.store(part_ptr + row[:, None] * D_LAT + offs_c[None, :], out.to(o_ptr.dtype.element_ty),
                     mask=h_ok[:, None])
            lse_ptr = ws_ptr + B * H * n_splits * (D_LAT * o_ptr.dtype.element_ty.primitive_bitwidth // 32)
        else:
            tl.store(ws_ptr + row[:, None] * D_LAT + offs_c[None, :], out, mask=h_ok[:, None])
            lse_ptr = ws_ptr + B * H * n_splits * D_LAT
        tl.store(lse_ptr + row, lse, mask=h_ok)


@triton.jit
def _mla_merge_kernel(
    ws_ptr, o_ptr, B, H, n_splits,
    D_LAT: tl.constexpr, SPLIT_BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
    WS_INPUT: tl.constexpr,
):
    if USE_PDL:  # launched early: wait until stage 1 has finished and its writes are visible
        tl.extra.cuda.gdc_wait()
    bh = tl.program_id(0).to(tl.int64)  # batch * H + head
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_s = tl.arange(0, SPLIT_BLOCK)
    if WS_INPUT:
        part_row = ws_ptr.to(tl.pointer_type(o_ptr.dtype.element_ty), bitcast=True) + bh * n_splits * D_LAT
        lse_row = ws_ptr + B * H * n_splits * (D_LAT * o_ptr.dtype.element_ty.primitive_bitwidth // 32) + bh * n_splits
    else:
        part_row = ws_ptr + bh * n_splits * D_LAT
        lse_row = ws_ptr + B * H * n_splits * D_LAT + bh * n_splits

    # one pass with a running maximum; the loads of a chunk do not wait on any arithmetic, so with one
    # chunk (the usual case) the merge is a single round trip to memory
    m = float("-inf")
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    w_sum = 0.0
    for s0 in range(0, n_splits, SPLIT_BLOCK):
        s_ok = s0 + offs_s < n_splits
        lse = tl.load(lse_row + s0 + offs_s, mask=s_ok, other=float("-inf"))
        part = tl.load(part_row + (s0 + offs_s)[:, None] * D_LAT + offs_d[None, :], mask=s_ok[:, None], other=0.0)
        # finite from the first chunk on: split 0 always has rows
        m_new = tl.maximum(m, tl.max(lse, axis=0))
        rescale = tl.math.exp2(m - m_new)
        w = tl.math.exp2(lse - m_new)  # empty or padded splits: exp2(-inf) = 0
        acc = acc * rescale + tl.sum(w[:, None] * part.to(tl.float32), axis=0)
        w_sum = w_sum * rescale + tl.sum(w, axis=0)
        m = m_new
    tl.store(o_ptr + bh * D_LAT + offs_d, (acc / w_sum).to(o_ptr.dtype.element_ty))


def _num_splits(B: int, n_head_blocks: int, S: int, block_n: int, waves: float) -> int:
    """How many slices to cut each sequence into (before rounding slices to whole tiles)."""
    fixed = CONFIG["NUM_SPLITS"]
    if fixed != "auto":
        return max(1, int(fixed))
    programs = B * n_head_blocks
    wanted = max(1, int(waves * NUM_SMS) // programs)  # fill the machine, no more
    most = max(1, S // max(CONFIG["MIN_SPLIT"], block_n))  # but keep every split worth its merge
    return min(wanted, most)


def plan(B: int, H: int, S: int) -> tuple[str, int, int, int, int, int]:
    """The launch plan CONFIG gives a shape: (regime prefix, head block, tile rows, head blocks,
    splits, rows per split)."""
    small = B * triton.cdiv(H, 64) < CONFIG["SMALL_BELOW"] and (H < 64 or B * H * S < CONFIG["SMALL_WORK_BELOW"])
    pre = "SMALL_" if small else ""  # the regime's keys
    # heads are the M of the tensor-core products: at least 16, at most BLOCK_H
    block_h = min(CONFIG[pre + "BLOCK_H"], max(16, triton.next_power_of_2(H)))
    block_n = CONFIG[pre + "BLOCK_N"]
    n_hb = triton.cdiv(H, block_h)
    # cut the sequence into equal slices of whole tiles; then drop slices that would start past S
    splits = _num_splits(B, n_hb, S, block_n, CONFIG[pre + "SPLIT_WAVES"])
    split_len = triton.cdiv(triton.cdiv(S, splits), block_n) * block_n
    if CONFIG["NUM_SPLITS"] == "auto":
        splits = triton.cdiv(S, split_len)
    return pre, block_h, block_n, n_hb, splits, split_len


def mla_decode(q: torch.Tensor, kv: torch.Tensor, scale: float) -> torch.Tensor:
    B, H, D = q.shape
    S = kv.shape[1]
    q, kv = q.contiguous(), kv.contiguous()  # no-ops for the contiguous inputs the problem promises
    o = torch.empty((B, H, D_LATENT), device=q.device, dtype=q.dtype)
    pre, block_h, block_n, n_hb, splits, split_len = plan(B, H, S)
    single = splits == 1
    pdl = bool(CONFIG["PDL"]) and q.is_cuda and not single
    ws_input = CONFIG[pre + "WORKSPACE"] == "input"
    # one workspace: partial outputs, then log-sum-exps (with one split stage 1 never touches it)
    part_words = D_LATENT * q.element_size() // 4 if ws_input else D_LATENT  # fp32 words per partial row
    ws = o if single else torch.empty(B * H * splits * (part_words + 1), device=q.device, dtype=torch.float32)

    tokens = CONFIG[pre + "FORM"] == "tokens"
    stages = max(2, CONFIG[pre + "num_stages"]) if tokens else CONFIG[pre + "num_stages"]  # see FORM above
    _mla_split_kernel[(n_hb, splits, B)](
        q, kv, ws, o, B, H, S, split_len, splits, scale * LOG2E,
        D_LAT=D_LATENT, D_ROPE=D - D_LATENT, BLOCK_H=block_h, BLOCK_N=block_n, SINGLE_SPLIT=single,
        TOKENS_M=tokens, USE_PDL=pdl, PREFETCH=CONFIG[pre + "PREFETCH"] if q.is_cuda else 0,  # inline PTX
        WS_INPUT=ws_input, num_warps=CONFIG[pre + "num_warps"], num_stages=stages,
    )
    if not single:
        block_d = min(CONFIG["MERGE_BLOCK_D"], D_LATENT)
        launch = {"launch_pdl": True} if pdl else {}  # a launch option of the NVIDIA backend only
        _mla_merge_kernel[(B * H, D_LATENT // block_d)](
            ws, o, B, H, splits,
            D_LAT=D_LATENT, SPLIT_BLOCK=min(triton.next_power_of_2(splits), MERGE_TILE // block_d), BLOCK_D=block_d,
            USE_PDL=pdl, WS_INPUT=ws_input, num_warps=CONFIG["MERGE_WARPS"], **launch,
        )
    return o
