"""Baselines for KDA: a chunked PyTorch implementation of our own, and flash-linear-attention's
Triton `chunk_kda` when the optional `fla` package is importable (never required, never shipped)."""
import os

import torch

CHUNK = 64


def kda_chunked_torch(q, k, v, g, beta, scale, chunk: int = CHUNK):
    """The chunk-parallel (WY / UT) form in fp32. Within a chunk with cumulative gates G (<= 0):
        A[i,j] = sum_c k_i,c k_j,c exp(G_i,c - G_j,c)   (j < i)
        (I + diag(beta) A) U = diag(beta) (V - (exp(G) * K) S0)        pseudo-values U
        O = scale ((exp(G) * Q) S0 + M U),  M[i,j] = sum_c q_i,c k_j,c exp(G_i,c - G_j,c)  (j <= i)
        S1 = exp(G_last) * S0 + (exp(G_last - G) * K)^T U
    The pairwise exponents are formed as differences (always <= 0), so no gate makes them overflow."""
    out_dtype = v.dtype
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    B, T, H, K = q.shape
    Vd = v.shape[-1]
    # [B, H, T, D] so that a chunk is a slice of the token axis
    q, k, v, g = (x.transpose(1, 2) for x in (q, k, v, g))
    beta = beta.transpose(1, 2)
    S = q.new_zeros(B, H, K, Vd)
    o = q.new_empty(B, H, T, Vd)
    for start in range(0, T, chunk):
        sl = slice(start, min(start + chunk, T))
        qc, kc, vc, bc = q[:, :, sl], k[:, :, sl], v[:, :, sl], beta[:, :, sl]
        G = g[:, :, sl].cumsum(dim=2)
        C = G.shape[2]
        diff = G.unsqueeze(3) - G.unsqueeze(2)  # [B, H, i, j, K] = G_i - G_j
        causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        decay = torch.exp(diff.masked_fill(~causal[:, :, None], float("-inf")))
        A = torch.einsum("bhik,bhjk,bhijk->bhij", kc, kc, decay).tril(-1)
        M = torch.einsum("bhik,bhjk,bhijk->bhij", qc, kc, decay)
        eG = G.exp()
        lhs = torch.eye(C, device=q.device) + bc.unsqueeze(-1) * A
        rhs = bc.unsqueeze(-1) * (vc - (eG * kc) @ S)
        U = torch.linalg.solve_triangular(lhs, rhs, upper=False, unitriangular=True)
        o[:, :, sl] = scale * ((eG * qc) @ S + M @ U)
        G_last = G[:, :, -1:]
        S = G_last.transpose(2, 3).exp() * S + (torch.exp(G_last - G) * kc).transpose(2, 3) @ U
    return o.transpose(1, 2).to(out_dtype)


def _fla_chunk_kda():
    """FLA's Triton chunk_kda, or None when fla is not installed. FLA_FLASH_KDA=0 keeps it from
    dispatching to a non-Triton backend, so the comparison is Triton against Triton."""
    os.environ["FLA_FLASH_KDA"] = "0"
    try:
        from fla.ops.kda import chunk_kda
    except Exception:  # not installed, or installed without a working backend on this host
        return None

    def fla_chunk_kda(q, k, v, g, beta, scale):
        out = chunk_kda(q, k, v, g, beta, scale=scale)
        return out[0] if isinstance(out, tuple) else out

    return fla_chunk_kda


def baselines(device: str) -> dict:
    out = {"torch_chunked": kda_chunked_torch}
    if device == "cuda":
        fla = _fla_chunk_kda()
        if fla is not None:
            out["fla_chunk_kda"] = fla
    return out
