"""Device code from a file the candidate names: tl.core.extern_elementwise links an LLVM bitcode
library from any path into the kernel at compile time (a precompiled body nobody reviewed, or a
file read by the compiler). Defence: of triton.language, only the kernel language's own builtins
(and libdevice's stubs) may be named; extern_elementwise, builtin, extern and dispatch are not.
Expected: rejected ("triton.language.core.extern_elementwise")."""
import torch
import triton
import triton.language as tl


@triton.jit
def _kda(o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(o_ptr + offs, mask=offs < n)
    y = tl.core.extern_elementwise("answer", "/tmp/answer.bc", [x], {(tl.float32,): ("answer", tl.float32)}, True)
    tl.store(o_ptr + offs, y, mask=offs < n)


def kda(q, k, v, g, beta, scale):
    o = torch.zeros_like(v)
    _kda[(triton.cdiv(o.numel(), 1024),)](o, o.numel(), BLOCK=1024)
    return o
