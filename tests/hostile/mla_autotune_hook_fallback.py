"""Falling back to torch in an autotuner pre-hook: a single-config autotuner whose pre_hook
computes the answer with torch before the (empty) kernel runs. Defence: statically rejected
(triton.Config takes no pre_hook); with the static policy skipped, only the autotuner's benchmarking
is exempt from the monitor, not its hooks around the real launch. Expected: rejected; run-time:
rejected ("torch computed")."""
import torch
import triton
import triton.language as tl


def _answer(nargs):
    q, kv, o, scale = nargs["q_ptr"], nargs["kv_ptr"], nargs["o_ptr"], nargs["scale"]
    p = torch.softmax((q.float() @ kv.float().transpose(1, 2)) * scale, dim=-1)
    o.copy_((p @ kv.float()[..., :512]).to(o.dtype))


@triton.autotune(configs=[triton.Config({}, pre_hook=_answer)], key=[])
@triton.jit
def _noop(q_ptr, kv_ptr, o_ptr, scale):
    tl.load(o_ptr)


def mla_decode(q, kv, scale):
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    _noop[(1,)](q, kv, o, scale)
    return o
