"""Banned library by vendoring: FLA's kernels pasted into the file (renamed imports, its helper and
kernel names kept; the bodies here are stand-ins). Defence: identifiers and copyright lines
characteristic of FLA, sglang/vllm and flash-attention. Expected: rejected ("vendored")."""
import torch
import triton
import triton.language as tl
# Copyright (c) 2023-2025, Songlin Yang, Yu Zhang


@triton.jit
def chunk_local_cumsum_vector_kernel(s, o, T, BT: tl.constexpr):
    pass


@triton.jit
def chunk_gated_delta_rule_fwd_kernel_h_blockdim64(k, v, w, h, T, BT: tl.constexpr):
    pass


def chunk_local_cumsum(g, chunk_size):
    return g


def solve_tril(A):
    return A


def kda(q, k, v, g, beta, scale):
    return torch.empty_like(v)
