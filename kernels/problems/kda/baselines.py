"""Baselines for KDA: a chunked PyTorch implementation of our own, and flash-linear-attention's
Triton `chunk_kda` when the optional `fla` package is importable (never required, never shipped)."""
import importlib.util
import os

import torch

from kernels.problems.spec import LazyBaseline

CHUNK = 64


def kda_chunked_torch(q, k, v, g, beta, scale, chunk: int = CHUNK, pair_budget: int = 2**28):
    """The chunk-parallel (WY / UT) form in fp32. Within a chunk with cumulative gates G (<= 0):
        A[i,j] = sum_c k_i,c k_j,c exp(G_i,c - G_j,c)   (j < i)
        T = (I + diag(beta) A)^-1;  Wk = T diag(beta) (exp(G) * K);  Wv = T diag(beta) V
        per chunk, in order:  U = Wv - Wk S0;  O = scale ((exp(G) * Q) S0 + M U);
                              S1 = exp(G_last) * S0 + (exp(G_last - G) * K)^T U
        with M[i,j] = sum_c q_i,c k_j,c exp(G_i,c - G_j,c)  (j <= i).
    Everything that does not depend on the state (A, M, the triangular solve) is computed for many
    chunks at once; only four small matmuls per chunk run in sequence. The pairwise exponents are
    formed as differences (always <= 0), so no gate makes them overflow."""
    out_dtype = v.dtype
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    B, T, H, K = q.shape
    Vd = v.shape[-1]
    n = -(-T // chunk)
    pad = n * chunk - T
    # [B, H, N, C, D]; padded tokens have k = q = v = beta = g = 0, so they change nothing
    def blocks(x):
        x = torch.nn.functional.pad(x.transpose(1, 2), (0, 0, 0, pad) if x.dim() == 4 else (0, pad))
        return x.reshape(B, H, n, chunk, *x.shape[3:])
    q, k, v, g, beta = blocks(q), blocks(k), blocks(v), blocks(g), blocks(beta)
    G = g.cumsum(dim=3)
    eG = G.exp()
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    eye = torch.eye(chunk, device=q.device)
    M = torch.empty(B, H, n, chunk, chunk, device=q.device)
    Wk = torch.empty(B, H, n, chunk, K, device=q.device)
    Wv = torch.empty(B, H, n, chunk, Vd, device=q.device)
    step = max(1, pair_budget // (B * H * chunk * chunk * K))  # chunks per batch of pairwise work
    for s in range(0, n, step):
        sl = slice(s, min(s + step, n))
        Gs, ks = G[:, :, sl], k[:, :, sl]
        decay = torch.exp((Gs.unsqueeze(4) - Gs.unsqueeze(3)).masked_fill(~causal[:, :, None], float("-inf")))
        kd = ks.unsqueeze(3) * decay  # [.., i, j, K]: k_j,c exp(G_i,c - G_j,c)
        A = (ks.unsqueeze(4) * kd).sum(-1).tril(-1)
        M[:, :, sl] = (q[:, :, sl].unsqueeze(4) * kd).sum(-1)
        lhs = eye + beta[:, :, sl].unsqueeze(-1) * A
        rhs = beta[:, :, sl].unsqueeze(-1) * torch.cat([eG[:, :, sl] * ks, v[:, :, sl]], dim=-1)
        W = torch.linalg.solve_triangular(lhs, rhs, upper=False, unitriangular=True)
        Wk[:, :, sl], Wv[:, :, sl] = W[..., :K], W[..., K:]
    qG = eG * q
    kTail = torch.exp(G[:, :, :, -1:] - G) * k
    gLast = eG[:, :, :, -1]  # [B, H, N, K]
    S = q.new_zeros(B, H, K, Vd)
    o = q.new_empty(B, H, n, chunk, Vd)
    for c in range(n):
        U = Wv[:, :, c] - Wk[:, :, c] @ S
        o[:, :, c] = scale * (qG[:, :, c] @ S + M[:, :, c] @ U)
        S = gLast[:, :, c].unsqueeze(-1) * S + kTail[:, :, c].transpose(-1, -2) @ U
    return o.reshape(B, H, n * chunk, Vd)[:, :, :T].transpose(1, 2).to(out_dtype)


def _fla_chunk_kda():
    """FLA's Triton chunk_kda. FLA_FLASH_KDA=0 keeps it from dispatching to a non-Triton backend, so
    the comparison is Triton against Triton. An installed fla that fails to import raises here."""
    os.environ["FLA_FLASH_KDA"] = "0"
    from fla.ops.kda import chunk_kda

    def fla_chunk_kda(q, k, v, g, beta, scale):
        out = chunk_kda(q, k, v, g, beta, scale=scale)
        return out[0] if isinstance(out, tuple) else out

    return fla_chunk_kda


def baselines(device: str) -> dict:
    out = {"torch_chunked": kda_chunked_torch}
    # offered when installed, imported on first use (seconds a reused figure does not need)
    if device == "cuda" and importlib.util.find_spec("fla") is not None:
        out["fla_chunk_kda"] = LazyBaseline(_fla_chunk_kda)
    return out
