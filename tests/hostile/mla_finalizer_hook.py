"""Work deferred into a Python hook: an object of the candidate's class whose __del__ finishes the
output when the garbage collector gets to it (after the clock has stopped), and whose __eq__ and
__hash__ would run in the judge's own dict lookups. Defence: a candidate's class has no dunder members
but __init__ (hooks Python calls on its own). Expected: rejected ("class member '__del__'")."""
import torch
import triton
import triton.language as tl


class Later:
    def __init__(self, q, kv, scale, o):
        self.work = (q, kv, scale, o)

    def __del__(self):
        q, kv, scale, o = self.work
        p = torch.softmax((q.float() @ kv.float().transpose(1, 2)) * scale, dim=-1)
        o.copy_((p @ kv.float()[..., :512]).to(o.dtype))

    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0


_KEEP = []


def mla_decode(q, kv, scale):
    o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
    _KEEP.append(Later(q, kv, scale, o))
    _KEEP.pop(0) if len(_KEEP) > 1 else None
    return o
