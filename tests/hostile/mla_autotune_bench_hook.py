"""Work hidden in the autotuner's benchmarking: a Config pre_hook runs before every benchmark
launch, where the torch-op monitor looks away (the autotuner's own timing uses torch); a key on a
per-call counter makes the autotuner benchmark again on every call, so the hook computes every answer
with torch, unwatched. Defence: triton.Config and triton.autotune take no hooks or callbacks
(pre_hook, post_hook, prune_configs_by, perf_model, do_bench), and may not be taken as values to be
given them elsewhere. Expected: rejected ("pre_hook")."""
import torch
import triton
import triton.language as tl

_CALLS = [0]


def _answer(nargs):
    q, kv, o, scale = nargs["q_ptr"], nargs["kv_ptr"], nargs["o_ptr"], nargs["scale"]
    p = torch.softmax((q.float() @ kv.float().transpose(1, 2)) * scale, dim=-1)
    o.copy_((p @ kv.float()[..., :512]).to(o.dtype))


@triton.autotune(configs=[triton.Config({"X": 1}, pre_hook=_answer), triton.Config({"X": 2}, pre_hook=_answer)],
                 key=["call"])
@triton.jit
def _noop(q_ptr, kv_ptr, o_ptr, scale, call, X: tl.constexpr):
    tl.load(o_ptr)


def mla_decode(q, kv, scale):
    _CALLS[0] += 1
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    _noop[(1,)](q, kv, o, scale, _CALLS[0])
    return o
