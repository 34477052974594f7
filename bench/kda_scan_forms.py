"""Precision of two ways to run KDA's sequential scan with bf16 tensor-core operands, on the CPU.

    python bench/kda_scan_forms.py [--T 4096] [--H 2] [--out FILE]          precision (CPU)
    python bench/kda_scan_forms.py speed [--out FILE]                       speed (an H200)
    TRITON_INTERPRET=1 python bench/kda_scan_forms.py check [--T 150 --H 2 --K 16]
                                                                            the experiment checked (CPU)

Both start from the same per-chunk quantities (chunk 64; the WY form of kernels/problems/kda/tuned.py):
w = T diag(beta) (exp(G) K), u0 = T diag(beta) V, qg = scale exp(G) Q, kd = exp(G_last - G) K,
M (scaled, causal) and gl = exp(G_last), computed here in fp64 and rounded to bf16 where a kernel
would store them.

  wy          what the shipped scan does per chunk: s = bf16(S); u = bf16(u0 - w s);
              o = qg s + M u; S = gl * S + kd^T u                     (two dependent products per chunk)
  transition  the state update folded ahead of time, in parallel over chunks:
              C = bf16(-kd^T w), D = bf16(kd^T u0), Q' = bf16(qg - M w), O0 = bf16(M u0); then per chunk
              s = bf16(S); o = Q' s + O0; S = gl * S + C s + D      (one product on the chain)

The transition form puts one K x K product per chunk on the sequential path instead of two, at the
price of more work in the parallel preparation. This script only asks whether it is accurate
enough: relative L2 error against the token-by-token recurrence in fp64, per gate case, plus a slow
decay (g ~ -U(0, 0.02): the state lives for thousands of tokens) that the problem's generator does not
draw but real models do. Products accumulate in fp32 (fp64 here, after the bf16 rounding of their
operands, which is what the tensor cores' fp32 accumulation approximates).

`speed` times the two scans alone on the GPU at B=1, T=8192, H=32, K=V=128 on random operands of the
right shapes and sizes: the shipped `_kda_scan` and `_scan_transition` below (an experiment, not
shipped: its preparation, which must form C, D, Q' and O0, does not exist yet), each at a few
settings, CUDA-graph replays with the L2 flushed before each. It answers how much of the scan's time
the second dependent product costs, before anyone writes that preparation.

`check` prints, at a small shape, what says the experiment itself is right (tests/kernels/problems/test_kda_scan_forms.py
bounds it): per gate case, the error of `_scan_transition` (in Triton's interpreter, fp32 throughout) and of
both bf16 emulations against the recurrence; and, under slow gates (the state carried across chunks), the
transition emulation with and without the chunk decay gl, so a scan that forgets the decay shows."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent

BT = 64


def bf(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(torch.float64)


def recurrence(q, k, v, g, beta, scale):
    """The definition, token by token, in fp64. [T, H, *] inputs (one sequence)."""
    T, H, K = q.shape
    S = torch.zeros(H, K, v.shape[-1], dtype=torch.float64)
    o = torch.empty(T, H, v.shape[-1], dtype=torch.float64)
    for t in range(T):
        S = S * g[t].exp().unsqueeze(-1)
        delta = v[t] - torch.einsum("hk,hkv->hv", k[t], S)
        S = S + beta[t][:, None, None] * k[t].unsqueeze(-1) * delta.unsqueeze(-2)
        o[t] = torch.einsum("hk,hkv->hv", q[t], S) * scale
    return o


def chunk_terms(q, k, v, g, beta, scale):
    """Per chunk, in fp64: w, u0, qg, kd, M (scaled, causal), gl. Shapes [H, N, BT, *]."""
    T, H, K = q.shape
    n = -(-T // BT)
    pad = n * BT - T

    def blocks(x):
        x = torch.nn.functional.pad(x.transpose(0, 1), (0, 0, 0, pad) if x.dim() == 3 else (0, pad))
        return x.reshape(H, n, BT, *x.shape[2:])
    q, k, v, g, beta = (blocks(x) for x in (q, k, v, g, beta))
    G = g.cumsum(2)
    diff = G.unsqueeze(3) - G.unsqueeze(2)  # [H, N, i, j, K]: G_i - G_j
    causal = torch.ones(BT, BT, dtype=torch.bool).tril()
    decay = torch.exp(diff.masked_fill(~causal[:, :, None], float("-inf")))
    A = (k.unsqueeze(3) * k.unsqueeze(2) * decay).sum(-1).tril(-1)
    M = (q.unsqueeze(3) * k.unsqueeze(2) * decay).sum(-1) * scale
    L = torch.eye(BT, dtype=torch.float64) + beta.unsqueeze(-1) * A
    rhs = beta.unsqueeze(-1) * torch.cat([G.exp() * k, v], dim=-1)
    W = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)
    w, u0 = W[..., :K], W[..., K:]
    qg = scale * G.exp() * q
    kd = torch.exp(G[:, :, -1:] - G) * k
    gl = G[:, :, -1].exp()
    return w, u0, qg, kd, M, gl, T


def scan_wy(w, u0, qg, kd, M, gl, T):
    w, u0, qg, kd, M = (bf(x) for x in (w, u0, qg, kd, M))
    H, n, _, K = w.shape
    S = torch.zeros(H, K, u0.shape[-1], dtype=torch.float64)
    out = []
    for c in range(n):
        s = bf(S)
        u = bf(u0[:, c] - w[:, c] @ s)
        out.append(qg[:, c] @ s + M[:, c] @ u)
        S = gl[:, c].unsqueeze(-1) * S + kd[:, c].transpose(-1, -2) @ u
    return torch.cat(out, 1)[:, :T].transpose(0, 1)


def transition_operands(w, u0, qg, kd, M, dtype=torch.float32):
    """C = -kd^T w, D = kd^T u0, Q' = qg - M w, O0 = M u0 ([H, N, *]) from the chunk terms, in `dtype`."""
    kdt = kd.transpose(-1, -2)
    return (x.to(dtype) for x in (-(kdt @ w), kdt @ u0, qg - M @ w, M @ u0))


def scan_transition(w, u0, qg, kd, M, gl, T):
    w, u0, qg, kd, M = (bf(x) for x in (w, u0, qg, kd, M))  # the preparation's stored operands
    C, D, Qp, O0 = (bf(x) for x in transition_operands(w, u0, qg, kd, M, torch.float64))
    H, n, _, K = w.shape
    S = torch.zeros(H, K, u0.shape[-1], dtype=torch.float64)
    out = []
    for c in range(n):
        s = bf(S)
        out.append(Qp[:, c] @ s + O0[:, c])
        S = gl[:, c].unsqueeze(-1) * S + C[:, c] @ s + D[:, c]
    return torch.cat(out, 1)[:, :T].transpose(0, 1)


@triton.jit
def _scan_transition(c_ptr, d_ptr, qp_ptr, o0_ptr, gl_ptr, o_ptr, T, H, V, NT,
                     BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVP: tl.constexpr):
    """Chunk after chunk: o = Q' s + O0;  S = gl * S + C s + D  (s: S in the dot dtype)."""
    bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    b = bh // H
    h = bh % H
    DT: tl.constexpr = c_ptr.dtype.element_ty
    rows = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = pid_v * BV + tl.arange(0, BV)
    TP = NT * BT
    o_base = (b.to(tl.int64) * T * H + h) * V
    S = tl.zeros([BK, BV], dtype=tl.float32)
    for n in range(NT):
        chunk = bh.to(tl.int64) * NT + n
        cmat = tl.load(c_ptr + chunk * BK * BK + offs_k[:, None] * BK + offs_k[None, :])
        d = tl.load(d_ptr + chunk * BK * BVP + offs_k[:, None] * BVP + offs_v[None, :]).to(tl.float32)
        r = n * BT + rows
        qp = tl.load(qp_ptr + bh.to(tl.int64) * TP * BK + r[:, None] * BK + offs_k[None, :])
        o0 = tl.load(o0_ptr + bh.to(tl.int64) * TP * BVP + r[:, None] * BVP + offs_v[None, :]).to(tl.float32)
        gl = tl.load(gl_ptr + chunk * BK + offs_k)
        s = S.to(DT)
        o = tl.dot(qp, s, acc=o0)
        omask = (r < T)[:, None] & (offs_v < V)[None, :]
        tl.store(o_ptr + o_base + r[:, None].to(tl.int64) * (H * V) + offs_v[None, :],
                 o.to(o_ptr.dtype.element_ty), mask=omask)
        S = tl.dot(cmat, s, acc=S * gl[:, None] + d)


def scan_transition_triton(w, u0, qg, kd, M, gl, T):
    """The kernel above on [H, N, BT, *] chunk terms of one sequence (the interpreter on the CPU):
    [T, H, V] fp32, to be compared with scan_transition's emulation."""
    H, n, bt, K = w.shape
    V = u0.shape[-1]
    C, D, Qp, O0 = transition_operands(w, u0, qg, kd, M)
    o = torch.empty(1, T, H, V)
    _scan_transition[(H, 1)](C.contiguous(), D.contiguous(), Qp.reshape(H, n * bt, K).contiguous(),
                             O0.reshape(H, n * bt, V).contiguous(), gl.float().contiguous(), o, T, H, V, n,
                             BT=bt, BK=K, BV=V, BVP=V)
    return o[0]


def speed(out_path: Path) -> dict:
    from kernels.evaluator.hostinfo import host_facts
    from kernels.problems.kda import tuned
    from kernels.evaluator.timing import L2Flush, captured, median_event_us
    B, T, H, K, V = 1, 8192, 32, 128, 128
    BT = 64
    NT = T // BT
    dev, dt = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)

    def rnd(*size, s=1.0):
        return (torch.randn(*size, generator=gen, device=dev) * s).to(dt)
    # magnitudes of the real terms: K-normalised keys, a decaying state
    w, qg, kd = rnd(B * H, T, K, s=K ** -0.5), rnd(B * H, T, K, s=K ** -0.5), rnd(B * H, T, K, s=K ** -0.5)
    u0, m = rnd(B * H, T, V), rnd(B * H, T, BT, s=BT ** -0.5)
    gl = torch.rand(B * H, NT, K, generator=gen, device=dev) * 0.9
    cmat, d = rnd(B * H, NT, K, K, s=0.05), rnd(B * H, NT, K, V, s=0.1)
    o = torch.empty(B, T, H, V, device=dev, dtype=dt)
    flush = L2Flush(torch.device(dev))
    rows = []
    for bv, warps, stages in ((16, 4, 3), (32, 4, 3), (16, 8, 3), (64, 8, 3)):
        for form in ("wy", "transition"):
            if form == "wy":
                def launch(bv=bv, warps=warps, stages=stages):
                    tuned._kda_scan[(B * H, V // bv)](w, u0, qg, kd, m, gl, o, T, H, V, NT, BT=BT, BK=K, BV=bv,
                                                       BVP=V, USE_PDL=False, WQ=False, num_warps=warps,
                                                       num_stages=stages)
            else:
                def launch(bv=bv, warps=warps, stages=stages):
                    _scan_transition[(B * H, V // bv)](cmat, d, qg, u0, gl, o, T, H, V, NT, BT=BT, BK=K, BV=bv,
                                                       BVP=V, num_warps=warps, num_stages=stages)
            row = {"form": form, "SCAN_BV": bv, "warps": warps, "stages": stages}
            try:
                launch()
                torch.cuda.synchronize()
                graph = captured(launch)
                row["graph_us"] = round(median_event_us(graph.replay, flush, 30), 2)
            except Exception as exc:  # a setting that does not compile or faults is a row, not the end
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            print(json.dumps(row), flush=True)
            rows.append(row)
    record = {"host": host_facts(), "shape": {"B": B, "T": T, "H": H, "K": K, "V": V}, "rows": rows}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(record, indent=1))
    return record


def rel(out, ref) -> float:
    from kernels.evaluator.timing import compare
    return compare(out, ref)[0]


def check(T: int, H: int, K: int) -> list[dict]:
    from kernels.problems.kda.reference import make_inputs
    shape = {"B": 1, "T": T, "H": H, "K": K, "V": K}
    rows = []
    for seed, case in ((0, "logsigmoid"), (1, "constant"), (2, "uniform"), (0, "slow")):
        x = make_inputs(shape, seed, "cpu", torch.float32)
        q, k, v, beta = (x[n][0].double() for n in ("q", "k", "v", "beta"))
        if case == "slow":  # the generator's gates barely carry the state across chunks; these do
            g = -0.02 * torch.rand(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        else:
            g = x["g"][0].double()
        ref = recurrence(q, k, v, g, beta, x["scale"])
        terms = chunk_terms(q, k, v, g, beta, x["scale"])
        if case == "slow":
            w, u0, qg, kd, M, gl, n = terms
            row = {"rel_err_transition": rel(scan_transition(*terms), ref),
                   "rel_err_transition_without_decay": rel(scan_transition(w, u0, qg, kd, M, torch.ones_like(gl), n),
                                                           ref)}
        else:
            row = {"rel_err_triton_fp32": rel(scan_transition_triton(*terms).double(), ref),
                   "rel_err_wy": rel(scan_wy(*terms), ref), "rel_err_transition": rel(scan_transition(*terms), ref)}
        rows.append({"gates": case, "seed": seed, **row})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="precision", choices=("precision", "speed", "check"))
    ap.add_argument("--T", type=int, default=None, help="precision: 4096; check: 150")
    ap.add_argument("--H", type=int, default=2)
    ap.add_argument("--K", type=int, default=None, help="K = V; precision: 128; check: 16")
    ap.add_argument("--out", default=None, help="default: .marathon/bench/kda_scan_forms.json or kda_scan_speed.json")
    args = ap.parse_args()
    results = ROOT / ".marathon" / "bench"
    if args.mode == "speed":
        speed(Path(args.out or results / "kda_scan_speed.json"))
        return 0
    if args.mode == "check":
        for row in check(args.T or 150, args.H, args.K or 16):
            print(json.dumps(row), flush=True)
        return 0
    args.T, args.K = args.T or 4096, args.K or 128
    args.out = args.out or str(results / "kda_scan_forms.json")
    from kernels.problems.kda.reference import make_inputs
    shape = {"B": 1, "T": args.T, "H": args.H, "K": args.K, "V": args.K}
    rows = []
    for seed, case in ((0, "logsigmoid"), (1, "constant"), (2, "uniform"), (0, "slow")):
        x = make_inputs(shape, seed, "cpu", torch.bfloat16)
        g = x["g"]
        if case == "slow":
            gen = torch.Generator().manual_seed(7)
            g = -0.02 * torch.rand(g.shape, generator=gen)
        q, k, v, beta = (x[n][0].to(torch.float64) for n in ("q", "k", "v", "beta"))
        g = g[0].to(torch.float64)
        ref = recurrence(q, k, v, g, beta, x["scale"])
        terms = chunk_terms(q, k, v, g, beta, x["scale"])
        row = {"gates": case, "T": args.T, "H": args.H,
               "rel_err_wy": rel(scan_wy(*terms), ref), "rel_err_transition": rel(scan_transition(*terms), ref)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "torch": torch.__version__,
                                          "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
