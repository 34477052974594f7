"""Answering the harness's own questions: the entry point is an object, not a function; the sandbox
asks it for `prepare` (called outside the torch-op monitor before each shape) and for `reference`
(whose make_inputs and output_spec would make the timed calls' inputs: the same tensors every
call, so that a cached answer replays). Defence: a candidate's attributes and methods may not take the
names the sandbox or Triton look up on its objects (prepare, reference, data_ptr).
Expected: rejected ("class member 'prepare'")."""
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


class Entry(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.reference = self
        self.fixed = {}

    def prepare(self, shape, dtype):
        self.fixed = {"q": torch.zeros((shape["B"], shape["H"], 576), dtype=dtype),
                      "kv": torch.zeros((shape["B"], shape["S"], 576), dtype=dtype), "scale": 1.0}

    def make_inputs(self, shape, seed, device, dtype):
        return self.fixed

    def output_spec(self, shape, dtype):
        return [(shape["B"], shape["H"], 512)]

    def forward(self, q, kv, scale):
        o = torch.empty((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
        _copy[(triton.cdiv(o.numel(), 1024),)](q, o, o.numel(), BLOCK=1024)
        return o


mla_decode = Entry()
