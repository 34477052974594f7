"""The arithmetic done by the launcher's Python on values it printed: a tensor's text (an f-string of it,
which torch renders with every dispatch mode popped, the torch-op monitor included) is parsed back into
floats, attention is computed with math.exp and sums, and a Triton kernel only copies the finished rows
into the output. Defence: the sandbox records every pop of torch's dispatch-mode stack, and the judge
rejects a call in which the monitor was popped before the call's probe.
Expected: rejected ("op monitor was suspended")."""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def _floats(row):
    text = f"{row.float().to('cpu')}"  # "tensor([ 0.1234, -1.5000, ...])": four decimals are enough here
    for mark in ("tensor", "(", ")", "[", "]", ","):
        text = text.replace(mark, " ")
    return [float(word) for word in text.split()]


def mla_decode(q, kv, scale):
    B, H, D = q.shape
    rows = []
    for b in range(B):
        keys = [_floats(k) for k in kv[b]]
        for head in q[b]:
            qv = _floats(head)
            scores = [sum(x * y for x, y in zip(qv, k)) * scale for k in keys]
            top = max(scores)
            p = [math.exp(s - top) for s in scores]
            den = sum(p)
            rows.append([sum(p[s] * keys[s][d] for s in range(len(p))) / den for d in range(512)])
    src = torch.tensor(rows, dtype=q.dtype, device=q.device)
    o = torch.empty((B, H, 512), device=q.device, dtype=q.dtype)
    n = B * H * 512
    _copy[(triton.cdiv(n, 1024),)](src, o, n, BLOCK=1024)
    return o
