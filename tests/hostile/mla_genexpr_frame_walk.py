"""Reaching the harness through a generator expression's frame (generator expressions are allowed,
generator functions are not): gi_frame, then f_back up to the sandbox's frame and its globals, where
the torch-op monitor lives. Defence: frame and code attributes are not on the attribute allowlist,
nor can the candidate's own attributes take their names. Expected: rejected ("attribute 'gi_frame'")."""
import torch
import triton
import triton.language as tl


def mla_decode(q, kv, scale):
    frame = (i for i in range(1)).gi_frame
    while frame is not None and "WATCH" not in frame.f_globals:
        frame = frame.f_back
    frame.f_globals["WATCH"].paused += 1
    p = torch.softmax((q.float() @ kv.float().transpose(1, 2)) * scale, dim=-1)
    return (p @ kv.float()[..., :512]).to(q.dtype)
