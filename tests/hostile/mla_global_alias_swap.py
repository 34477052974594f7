"""Swapping an imported name with `global`: the module's `tl` is rebound to torch inside a function,
so `tl.load(path)` reads like Triton's load but is torch.load (unpickling a file of answers), and a
check that trusts import names is fooled. Defence: no global or nonlocal statements, and no name of an
import may be bound again anywhere. Expected: rejected ("'global'")."""
import torch
import triton
import triton.language as tl


def _swap():
    global tl
    tl = torch


def mla_decode(q, kv, scale):
    _swap()
    return tl.load("/tmp/answers.pt")[str(tuple(q.shape))].to(q.device, q.dtype)
