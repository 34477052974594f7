"""The static candidate policy: an allowlist of syntax, names and API (kernels/evaluator/policy.py).

Every rule has a minimal source it refuses and a minimal honest one it accepts; every honest source
the project ships or judges in its tests passes, so that a later tightening cannot break them silently."""
from pathlib import Path

import pytest

from kernels.evaluator.policy import MAX_SOURCE_BYTES, check_source, module_violation
from kernels.problems.spec import PROBLEM_NAMES, get_problem, resolve_kernel
from kernels.problems.tunables import all_configs, read_tunables, with_config

ROOT = Path(__file__).resolve().parents[3]
HEADER = "import torch\nimport triton\nimport triton.language as tl\n"


def violations(body: str, entry: str = "kda") -> list[str]:
    return [str(v) for v in check_source(HEADER + body + f"\ndef {entry}(*a):\n    return None\n", entry)]


def refused(body: str, needle: str) -> None:
    found = violations(body)
    assert any(needle in v for v in found), (body, found)
    assert all(v.startswith("line ") for v in found)


def accepted(body: str) -> None:
    assert violations(body) == [], body


# --- every honest source ----------------------------------------------------------------------------
def honest_sources() -> list[tuple[str, str, str]]:
    """(label, source, entry point) of every source the project ships, documents or judges honest."""
    out = []
    for name in PROBLEM_NAMES:
        spec = get_problem(name)
        for kernel in spec.shipped_kernels:
            source = resolve_kernel(spec, kernel)[1]
            out.append((f"{name}:{kernel}", source, spec.entry_point))
            found = read_tunables(source)
            if found:  # the tuner's (and the bench scripts') configurations: every value of every knob
                tunables, config = found
                for knob, values in tunables.items():
                    for value in values:
                        out.append((f"{name}:{kernel}:{knob}={value}", with_config(source, {**config, knob: value}),
                                    spec.entry_point))
    for path in sorted((ROOT / "docs" / "examples").glob("*_kernel.py")):
        out.append((f"docs/examples/{path.name}", path.read_text(), "ModelNew"))
    out.append(("fence_probe", (ROOT / "kernels" / "evaluator" / "fence_probe" / "candidate.py").read_text(), "ModelNew"))

    import marathon_support
    test_hostile, test_kernelbench, test_mla_tuned = (
        marathon_support.load_test_module(n) for n in ("test_hostile", "test_kernelbench", "test_mla_tuned"))
    out += [("mla_variant", marathon_support.mla_variant(BLOCK_S=32), "mla_decode"),
            ("mla_wrong", marathon_support.mla_wrong(), "mla_decode")]
    for label in ("HONEST", "WRONG", "TORCH_COMPUTES"):  # the last two pass here and fail at run time
        out.append((f"test_kernelbench.{label}", getattr(test_kernelbench, label), "ModelNew"))
    calls_linear = (ROOT / "docs" / "examples" / "linear_gelu_kernel.py").read_text().replace(
        "        x = x.contiguous()\n", "        x = x.contiguous()\n        self.linear(x)\n")
    out.append(("linear_gelu calling self.linear (the monitor rejects it)", calls_linear, "ModelNew"))
    out.append(("test_mla_tuned.forced_splits", test_mla_tuned.forced_splits(FORM="tokens", SMALL_FORM="tokens"),
                "mla_decode"))
    # hostile files judged at run time with the policy on (their defence is not the policy), and the controls
    for case in test_hostile.CASES + test_hostile.CONTROLS:
        if not case.static and not case.bypass:
            out.append((f"test_hostile:{case.id}", case.source(), get_problem(case.problem).entry_point))
    return out


HONEST = honest_sources()


@pytest.mark.parametrize("label, source, entry", HONEST, ids=[h[0] for h in HONEST])
def test_every_honest_source_passes(label, source, entry):
    assert [str(v) for v in check_source(source, entry)] == []


def test_the_honest_set_is_complete():
    labels = {h[0] for h in HONEST}
    assert {"mla_decode:starter", "mla_decode:tuned", "kda:starter", "kda:tuned", "fence_probe"} <= labels
    assert len([h for h in labels if h.startswith("docs/examples/")]) >= 3
    assert len([h for h in labels if h.startswith("test_hostile:")]) >= 20


# --- syntax ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, needle, good", [
    ("def f(o):\n    match o:\n        case object(__globals__=g):\n            return g\n", "'match' statement",
     "def f(o):\n    if o:\n        return o\n"),
    ("def f():\n    global X\n    X = 1\n", "'global'", "X = 1\n"),
    ("def f():\n    x = 1\n    def g():\n        nonlocal x\n        x = 2\n", "'nonlocal'",
     "def f():\n    x = 1\n    def g():\n        return x + 1\n    return g()\n"),
    ("def f():\n    yield 1\n", "generator function", "def f(xs):\n    return tuple(x.contiguous() for x in xs)\n"),
    ("def f():\n    yield from ()\n", "generator function", "def f():\n    return [i for i in range(3)]\n"),
    ("async def f():\n    return 1\n", "async function", "def f():\n    return 1\n"),
    ("def f(x):\n    try:\n        pass\n    except* ValueError:\n        pass\n", "'except*'",
     "def f(x):\n    try:\n        return x\n    except ValueError:\n        return None\n"),
    ("def f(o):\n    return '{0.__globals__}'.format(o)\n", "str.format", "def f(o):\n    return f'{o}!'\n"),
    ("def f(o):\n    return '{0.__class__}'.format_map({'x': o})\n", "str.format_map",
     "def f(o):\n    return '%d items' % len(o)\n"),
    ("def f(o):\n    return f'{o.__class__}'\n", "'__class__'", "def f(x):\n    return f'{x.shape} {x.dtype:}'\n"),
    ("def f():\n    class B:\n        pass\n", "not at the top level", "class B:\n    pass\n"),
    ("class A(metaclass=type):\n    pass\n", "class keywords", "class A:\n    pass\n"),
    ("class A:\n    for i in range(3):\n        pass\n", "a class body holds",
     "class A:\n    '''doc'''\n    BLOCK = 64\n    def f(self):\n        return self.BLOCK\n"),
    ("class A:\n    x.y = 1\n", "only plain names", "class A:\n    y: int = 1\n"),
    ("def h():\n    return 8\n@triton.jit\ndef k(x, B: tl.constexpr = h()):\n    pass\n", "default 'h()'",
     "B0 = 8\n@triton.jit\ndef k(x, B: tl.constexpr = 8, C: tl.constexpr = B0, D=tl.float32):\n    pass\n"),
])
def test_syntax(bad, needle, good):
    refused(bad, needle)
    accepted(good)


def test_only_the_outermost_refused_form_is_reported():
    found = violations("def f(o):\n    match o:\n        case {'a': [1, *rest]}:\n            return rest\n")
    assert len([v for v in found if "not allowed in a candidate" in v]) == 1, found


# --- names ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["getattr", "setattr", "delattr", "hasattr", "vars", "dir", "type", "object",
                                  "open", "exec", "eval", "compile", "globals", "locals", "input", "breakpoint",
                                  "memoryview", "property", "staticmethod", "classmethod", "exit", "help",
                                  "OSError", "BaseException"])
def test_builtins_outside_the_allowlist_are_refused(name):
    refused(f"def f(x):\n    return {name}\n", f"uses {name!r}: not a builtin")


def test_allowed_builtins():
    accepted("def f(xs, d):\n"
             "    n = len(xs) + min(1, 2) + max(3, 4) + int(2.0) + round(float('1.5')) + abs(-1) + sum(range(3))\n"
             "    ok = isinstance(xs, (tuple, list)) and all(xs) or any(xs) and bool(d) and callable(f)\n"
             "    pairs = sorted(zip(xs, reversed(list(enumerate(map(str, filter(None, xs)))))))\n"
             "    print(n, ok, pairs, divmod(7, 2), pow(2, 3), dict(a=1), set(xs), frozenset(), slice(1, 2))\n"
             "    if not ok:\n        raise ValueError('bad') from None\n"
             "    assert n, 'n'\n    return next(iter(xs))\n")


@pytest.mark.parametrize("bad, needle, good", [
    # a builtin name is safe only where a function's own binding shadows it
    ("if False:\n    open = print\nX = open('x')\n", "uses 'open'", "def f(input, type):\n    return input, type\n"),
    ("try:\n    pass\nexcept Exception as open:\n    pass\nX = open\n", "uses 'open'",
     "def f():\n    try:\n        pass\n    except Exception as err:\n        return str(err)\n"),
    # a comprehension's first iterable and a lambda's defaults belong to the enclosing scope
    ("def f(x):\n    return [0 for getattr in getattr(x, 'y')]\n", "uses 'getattr'",
     "def f(x):\n    return [len(v) for v in x]\n"),
    ("f = lambda g=getattr: g\n", "uses 'getattr'", "f = lambda meta, n=4: (triton.cdiv(n, meta['BLOCK']),)\n"),
    ("class A:\n    x = [getattr for _ in range(1)]\n", "uses 'getattr'", "class A:\n    x = 1\n"),
    # dunder names: module globals that exist without an assignment
    ("def f():\n    return __builtins__\n", "'__builtins__'", "if __name__ == '__main__':\n    pass\n"),
    ("X = __loader__\n", "'__loader__'", "X = 1\n"),
    ("__all__ = ['kda']\n", "binds '__all__'", "ALL = ['kda']\n"),
    # an imported name always means its import
    ("def f(tl):\n    return tl.load('x')\n", "rebinds 'tl'", "def f(t):\n    return t\n"),
    ("def f():\n    return (tl := torch)\n", "rebinds 'tl'", "def f(xs):\n    return [(n := len(x)) for x in xs], n\n"),
    ("for torch in range(3):\n    pass\n", "rebinds 'torch'", "for i in range(3):\n    pass\n"),
    ("del torch\n", "rebinds 'torch'", "X = [1]\ndel X[0]\n"),
    ("import math as tl\n", "imports two different things as 'tl'", "import triton.language as tl\n"),
    ("M = torch\n", "uses the module torch as a value", "E = torch.empty\n"),
    ("E = torch.cuda.Event\n", "uses the class torch.cuda.Event as a value",
     "def f(x):\n    e = torch.cuda.Event(enable_timing=True)\n    return isinstance(x, (torch.Tensor, torch.nn.Module))\n"),
    ("def f():\n    return torch.Tensor.type\n", "uses torch.Tensor.type: of a class, only",
     "from triton.tools.tensor_descriptor import TensorDescriptor\ndef f(x):\n    return TensorDescriptor.from_tensor(x, [16, 16])\n"),
    ("class A:\n    def __init__(self):\n        self.device = torch.Tensor\n", "uses the class torch.Tensor as a value",
     "class A:\n    def __init__(self, x: torch.Tensor):\n        self.device = x.device\n"),
    ("def f():\n    return [torch][0].load('x')\n", "module torch as a value", "def f():\n    return [torch.float32][0]\n"),
    # the candidate's classes: never a value (their methods could then get a foreign self)
    ("class A:\n    def m(self):\n        return 1\ndef f():\n    return A.m(3)\n", "uses class A as a value",
     "class A:\n    N = 4\n    def m(self):\n        return self.N\ndef f(x):\n    a = A()\n"
     "    return a.m() + A.N if isinstance(x, (A, int)) else None\n"),
    ("class A:\n    def m(self):\n        return 1\n    n = m\ndef f():\n    return A.n(3)\n", "uses class A as a value",
     "class A:\n    def m(self):\n        return 1\n    def n(self):\n        return self.m()\n"),
    ("class A:\n    pass\nB = A\n", "uses class A as a value", "class A:\n    pass\nclass B(A):\n    pass\n"),
    ("class A(torch.Tensor):\n    pass\n", "derives from torch.nn.Module",
     "from torch import nn\nclass A(nn.Module):\n    pass\nclass B(torch.nn.Module):\n    pass\n"),
    # hooks Python calls on its own
    ("class A:\n    def __del__(self):\n        pass\n", "class member '__del__'",
     "class A:\n    def __init__(self):\n        self.n = 1\n"),
    ("class A:\n    def __torch_function__(self, *a):\n        pass\n", "class member '__torch_function__'",
     "class A:\n    def forward(self, x):\n        return x\n"),
    ("class A:\n    __slots__ = ()\n", "class member '__slots__'", "class A:\n    slots = ()\n"),
    ("class A:\n    def data_ptr(self):\n        return 0\n", "class member 'data_ptr'",
     "class A:\n    def pointer(self):\n        return 0\n"),
    ("from torch import nn\nclass A(nn.Module):\n    def load_state_dict(self, sd):\n        pass\n",
     "class member 'load_state_dict'",
     "from torch import nn\nclass A(nn.Module):\n    def forward(self, x):\n        return x\n"),
    # attribute stores: only on the method's own object, never rebound, with names of its own
    ("def patch(self):\n    self.elapsed_time = None\n", "patching objects",
     "class A:\n    def __init__(self, w):\n        self.w, self.n = w, 0\n        self.n += 1\n        del self.n\n"),
    ("class A:\n    def m(self):\n        self = torch.cuda.Event\n        self.x = 1\n", "rebinds 'self'",
     "class A:\n    def m(self):\n        def g():\n            self.x = 1\n        g()\n"),
    ("class A:\n    def m(self):\n        def g(self):\n            self.y = 1\n", "rebinds 'self'",
     "class A:\n    def m(self):\n        return [self.m for _ in range(2)]\n"),
    ("class A:\n    def m(self):\n        self.run = 1\n", "assigns to attribute 'run'",
     "class A:\n    def m(self):\n        self.runner = 1\n"),
    ("from torch import nn\nclass A(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.training = False\n", "assigns to attribute 'training'",
     "from torch import nn\nclass A(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
     "        self.weight = nn.Parameter(torch.empty(d))\n        self.dim = d\n        self.norm = nn.LayerNorm(d)\n"),
    ("class A:\n    def m(self):\n        self._x = 1\n", "assigns to attribute '_x'", "class A:\n    def m(self):\n        self.x = 1\n"),
    ("def f(d):\n    d.x = 1\n", "patching objects", "def f(d):\n    d['x'] = 1\n"),
    # super: only bare, in a method
    ("def f(x):\n    torch.nn.Module.__init__(x)\n", "only as nn.Module.__init__(self)",
     "class A(torch.nn.Module):\n    def __init__(self):\n        torch.nn.Module.__init__(self)\n"),
    ("class A(torch.nn.Module):\n    def m(self, t):\n        return super(A, t).m(t)\n", "super: only as super()",
     "class A(torch.nn.Module):\n    def __init__(self):\n        super(A, self).__init__()\n"),
    ("class A(torch.nn.Module):\n    def m(self, t):\n        return super(torch.nn.Module, t)\n", "super: only as super()",
     "from torch import nn\nclass A(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "class B(nn.Module):\n    def __init__(self):\n        nn.Module.__init__(self)\n"),
])
def test_names(bad, needle, good):
    refused(bad, needle)
    accepted(good)


# --- API ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body, needle", [
    ("import os", "only"), ("import subprocess", "only"), ("import ctypes", "only"), ("import socket", "only"),
    ("import importlib", "only"), ("import sys", "only"), ("import threading", "only"), ("import gc", "only"),
    ("import fla", "third-party kernel libraries"), ("from fla.ops.kda import chunk_kda", "third-party kernel libraries"),
    ("import flash_attn", "third-party kernel libraries"), ("from . import helper", "relative"),
    ("from torch import *", "import *"), ("from __future__ import barry_as_FLUFL", "__future__"),
    ("from torch.utils.cpp_extension import load_inline", "torch.utils.cpp_extension"),
    ("import torch.utils.collect_env", "torch.utils.collect_env"), ("import torch.fx", "torch.fx"),
    ("from torch.utils import model_zoo", "torch.utils.model_zoo"), ("from torch import ops", "torch.ops"),
    ("from triton import compiler", "triton.compiler"), ("from triton.runtime import driver", "triton.runtime"),
    ("import torch.nn.functional as F\nY = F.softmax", "torch.nn.functional.softmax"),
    ("from typing import get_type_hints", "typing.get_type_hints"),
])
def test_imports_refused(body, needle):
    refused(body, needle)


def test_imports_accepted():
    accepted("from __future__ import annotations\nimport math\nimport functools\nimport itertools\nimport operator\n"
             "import torch.nn.functional as F\n"
             "import typing\nimport dataclasses\nfrom typing import Optional, Tuple\nfrom torch import nn, Tensor\n"
             "import torch.nn as nn2\nfrom triton.language.extra import libdevice\nfrom triton.language.extra.cuda import gdc_wait\n"
             "from triton.tools.tensor_descriptor import TensorDescriptor\nfrom triton import cdiv, next_power_of_2\n"
             "class M(nn.Module):\n"
             "    def forward(self, x: Tensor, d: TensorDescriptor) -> Optional[Tuple[int, typing.Any]]:\n"
             "        p = nn2.Parameter(torch.empty(1))\n"
             "        return (libdevice.exp, gdc_wait, cdiv(3, 2), next_power_of_2(3), math.pi, p,\n"
             "                functools.reduce(operator.add, [1]), list(itertools.product([1], [2])), dataclasses.field(default=1))\n")


@pytest.mark.parametrize("expr", [
    "torch.softmax(x, -1)", "torch.matmul(x, x)", "torch.einsum('ij->i', x)", "torch.load('f')", "torch.save(x, 'f')",
    "torch.compile(x)", "torch.ops.aten.mm", "torch.library", "torch.utils.collect_env.run('id')",
    "torch.utils.model_zoo.load_url('u')", "torch.utils.file_baton.FileBaton('f')", "torch.fx.Graph()",
    "torch.cuda.Stream()", "torch.cuda.stream(x)", "torch.cuda.set_device(0)", "torch.cuda.graph",
    "torch.cuda.CUDAGraph()", "torch.cuda.set_per_process_memory_fraction(1.0)", "torch.cuda.memory",
    "torch.backends.cudnn", "torch.manual_seed(0)", "torch.overrides", "torch.nn.functional.softmax(x, -1)",
    "torch.sys.modules", "torch.os.system('x')", "torch.hub.load", "torch.jit.script",
    "triton.runtime.driver.active", "triton.compiler.compile", "triton.testing.do_bench", "triton.set_allocator(x)",
    "triton.knobs", "triton.tools.disasm", "tl.core.builtins.open('f')", "tl.core.inspect", "tl.core.knobs",
    "tl.target_info.driver", "tl.standard.jit", "tl.core.ir", "tl.extra.pkgutil", "tl.core.JITCallable",
    "tl.core.builtin(x)", "tl.core.extern(x)", "tl.core.dispatch(x)", "tl.core.extern_elementwise('l', '/x', [], {}, True)",
])
def test_api_outside_the_allowlist_is_refused(expr):
    root = expr.split("(")[0]
    found = violations(f"def f(x):\n    return {expr}\n")
    assert any("not in the" in v or "private" in v for v in found), (expr, found)
    assert any(root.split(".")[1] in v for v in found), (expr, found)


def test_private_names_of_allowed_modules_are_refused():
    refused("X = torch._C", "torch._C: private and dunder")
    refused("X = torch.__dict__", "dunder")
    refused("X = tl.core._unwrap_if_constexpr", "private")
    refused("from torch import _dynamo", "private")


def test_api_accepted():
    accepted("def f(x, q):\n"
             "    a = torch.empty((2, 3), device=x.device, dtype=torch.float16)\n"
             "    b = torch.empty_like(x) if x.is_cuda else torch.zeros_like(x)\n"
             "    c = torch.full((4,), 2.0, dtype=torch.bfloat16) + torch.arange(4) * torch.ones(4)\n"
             "    d = torch.empty_strided((2, 2), (2, 1)).as_strided((2,), (1,))\n"
             "    e = torch.tensor([1, 2], dtype=torch.int32)\n"
             "    n = torch.cuda.get_device_properties(x.device).multi_processor_count if torch.cuda.is_available() else 1\n"
             "    cap = torch.cuda.get_device_capability() if torch.cuda.device_count() else (0, 0)\n"
             "    with torch.cuda.device(x.device.index):\n"
             "        torch.cuda.synchronize()\n"
             "    ev = torch.cuda.Event(enable_timing=True)\n"
             "    ev.record()\n"
             "    eps = torch.finfo(x.dtype).eps + torch.finfo(x.dtype).max + torch.iinfo(torch.int32).max\n"
             "    p = torch.nn.Parameter(torch.randn(3))\n"
             "    torch.nn.init.kaiming_uniform_(p, a=5 ** 0.5)\n"
             "    o = torch.empty_like(x, memory_format=torch.contiguous_format)\n"
             "    lin = torch.nn.Linear(3, 4)\n"
             "    y = x.view(-1).reshape(2, -1).permute(1, 0).transpose(0, 1).contiguous().to(torch.float32).float()\n"
             "    z = q.unsqueeze(0).squeeze(0).expand(2, -1).flatten().narrow(0, 0, 1).clone().detach()\n"
             "    s = x.stride(0) + x.size(1) + x.shape[0] + x.numel() + x.dim() + x.element_size() + x.data_ptr() % 16\n"
             "    w = lin.weight.data if x.device.type == 'cuda' else lin.bias\n"
             "    cfg = {'a': 1}\n"
             "    return a, b, c, d, e, n, cap, eps, p, y, z, s, w, cfg.get('a'), x.new_empty((2,)).fill_(0).zero_()\n")


def test_all_of_triton_language_in_kernels():
    accepted("@triton.jit\ndef k(x_ptr, o_ptr, n, BLOCK: tl.constexpr):\n"
             "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
             "    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)\n"
             "    y = tl.math.exp2(x) + tl.extra.cuda.libdevice.tanh(x) + tl.sum(x, axis=0) + x.sum(axis=0) + x.T.max()\n"
             "    w = tl.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', [x], dtype=tl.float32, is_pure=True, pack=1)\n"
             "    for i in tl.static_range(2):\n"
             "        y = tl.where(y > 0, y, 0.0)\n"
             "    DT: tl.constexpr = o_ptr.dtype.element_ty\n"
             "    tl.extra.cuda.gdc_wait()\n"
             "    tl.store(o_ptr + offs, (y + w).to(DT), mask=offs < n)\n")


@pytest.mark.parametrize("bad, needle, good", [
    ("C = triton.Config({}, pre_hook=print)\n", "triton.Config(pre_hook=...)",
     "C = triton.Config({'BLOCK': 64}, num_warps=4, num_stages=3, num_ctas=1, maxnreg=128)\n"),
    ("C = triton.Config({}, ir_override='/etc/passwd')\n", "triton.Config(ir_override=...)",
     "C = [triton.Config({'B': b}, 4, 2) for b in (16, 32)]\n"),
    ("C = triton.Config({}, 4, 3, 1, None, print)\n", "at most 5 positional", "C = triton.Config({}, 4, 3, 1, None)\n"),
    ("C = triton.Config(**{'kwargs': {}})\n", "pass its options by name", "C = triton.Config(kwargs={})\n"),
    ("C = triton.Config\n", "uses triton.Config as a value", "from triton import Config\nC = Config({})\n"),
    ("import functools\nP = functools.partial(triton.Config, pre_hook=print)\n", "triton.Config as a value",
     "import functools\nP = functools.partial(max, 1)\n"),
    ("@triton.autotune(configs=[], key=[], prune_configs_by={})\n@triton.jit\ndef k(x):\n    pass\n",
     "triton.autotune(prune_configs_by=...)",
     "@triton.autotune(configs=[triton.Config({'B': 16})], key=['n'], reset_to_zero=['x'], restore_value=['x'])\n"
     "@triton.heuristics({'E': lambda args: args['n'] % 2 == 0})\n@triton.jit\ndef k(x, n, B: tl.constexpr, E: tl.constexpr):\n    pass\n"),
    ("@triton.autotune(configs=[], key=[], do_bench=print)\n@triton.jit\ndef k(x):\n    pass\n", "do_bench=",
     "@triton.autotune([], ['n'], warmup=5, rep=20)\n@triton.jit\ndef k(x, n):\n    pass\n"),
    ("@triton.autotune(configs=[], key=[], post_hook=print)\n@triton.jit\ndef k(x):\n    pass\n", "post_hook=",
     "@triton.jit(do_not_specialize=['n'], debug=False, noinline=False)\ndef k(x, n):\n    pass\n"),
    ("@triton.jit(launch_metadata=print)\ndef k(x):\n    pass\n", "launch_metadata=",
     "@triton.jit\ndef k(x):\n    pass\n"),
    ("@triton.jit(repr=print)\ndef k(x):\n    pass\n", "repr=", "K = triton.jit(lambda x: x)\n"),
    ("def h():\n    pass\nH = tl.constexpr(h)\n", "tl.constexpr(...) of something other than a literal",
     "H = tl.constexpr(64)\nG = tl.constexpr(-1.5 * 2)\n"),
    ("@staticmethod\ndef f():\n    pass\n", "decorator 'staticmethod'",
     "import functools\n@functools.lru_cache(maxsize=None)\ndef f(n):\n    return n\n@torch.no_grad()\ndef g(x):\n    return x\n"),
    ("def deco(f):\n    return f\n@deco\ndef f():\n    pass\n", "decorator 'deco'",
     "import dataclasses\n@dataclasses.dataclass\nclass P:\n    block: int = 16\n    warps: list = dataclasses.field(default_factory=list)\n"),
    ("@tl.core.builtin\ndef f(x, _semantic=None):\n    return x\n", "decorator 'tl.core.builtin'",
     "import functools\n@functools.cache\ndef f(n):\n    return n\n"),
    ("import operator\nG = operator.attrgetter('x')\n", "operator.attrgetter",
     "import operator\nG = operator.itemgetter(0)\nM = operator.mul\n"),
    ("import typing\nG = typing.get_type_hints\n", "typing.get_type_hints", "import typing\nT = typing.Optional[int]\n"),
])
def test_restricted_calls_and_decorators(bad, needle, good):
    refused(bad, needle)
    accepted(good)


@pytest.mark.parametrize("bad, needle, good", [
    ("def f(x):\n    return x.softmax(-1)\n", "attribute 'softmax'", "def f(x):\n    return x.view(-1)\n"),
    ("def f(x):\n    return x.sum()\n", "attribute 'sum'", "def f(x):\n    return x.numel()\n"),
    ("def f(x):\n    return x.max()\n", "attribute 'max' called", "def f(x):\n    return torch.finfo(x.dtype).max\n"),
    ("def f(x):\n    return x.type('os.system')\n", "attribute 'type' called", "def f(x):\n    return x.device.type\n"),
    ("def f(x):\n    return x.numpy().tofile('f')\n", "attribute 'tofile'", "def f(x):\n    return x.detach()\n"),
    ("def f(x):\n    return x.tolist()\n", "attribute 'tolist'", "def f(x):\n    return x.size()\n"),
    ("def f(x):\n    return x[0].item()\n", "attribute 'item'", "def f(x):\n    return x[0].numel()\n"),
    ("def f(x):\n    return x.untyped_storage()\n", "attribute 'untyped_storage'", "def f(x):\n    return x.storage_offset()\n"),
    ("def f(x):\n    return x.as_subclass(torch.Tensor)\n", "attribute 'as_subclass'", "def f(x):\n    return x.detach()\n"),
    ("def f(k):\n    return k.cache\n", "attribute 'cache'", "def f(k):\n    return k[(1,)]\n"),
    ("def f(k):\n    k.pre_run_hooks.append(print)\n", "attribute 'pre_run_hooks'", "def f(k):\n    k.append(print)\n"),
    ("def f(m):\n    m.register_forward_hook(print)\n", "attribute 'register_forward_hook'",
     "def f(m, t):\n    m.register_buffer('mask', t)\n    return m.mask\n"),
    ("def f():\n    return (i for i in range(1)).gi_frame\n", "attribute 'gi_frame'", "def f():\n    return list(i for i in range(1))\n"),
    ("def f(e):\n    return e.__traceback__\n", "attribute '__traceback__'", "def f(e):\n    return repr(e)\n"),
    ("def f(e):\n    return e.args\n", "attribute 'args'", "def f(e):\n    return str(e)\n"),
    ("class A:\n    def __init__(self):\n        self.obj = 1\ndef f(e):\n    return e.obj\n", "attribute 'obj'",
     "class A:\n    def __init__(self):\n        self.item_count = 1\n"),
    ("def f(x):\n    t = x.type\n    return t('fla.ops')\n", "attribute 'type': only as",
     "def f(x):\n    return x.device.type == 'cuda'\n"),
    ("class A:\n    def prepare(self, shape, dtype):\n        pass\n", "class member 'prepare'",
     "class A:\n    def plan(self, shape, dtype):\n        pass\n"),
    ("class A:\n    def __init__(self):\n        self.reference = self\n", "assigns to attribute 'reference'",
     "class A:\n    def __init__(self):\n        self.expected = None\n"),
    ("def f(x):\n    return x._base\n", "attribute '_base'", "def f(x):\n    return x.data\n"),
    # the module's own names may be used on values, unless torch or triton objects have them
    ("class A:\n    def __init__(self):\n        self.fn = 1\ndef f(k):\n    return k.fn\n", "attribute 'fn'",
     "class A:\n    def __init__(self):\n        self.plan = 1\ndef f(a):\n    return a.plan\n"),
    # inside kernels: triton.language's tensor methods; outside: torch's views and casts
    ("@triton.jit\ndef k(x):\n    y = tl.load(x)\n    return y.numpy()\n", "attribute 'numpy'",
     "@triton.jit\ndef k(x):\n    y = tl.load(x)\n    return y.sum(axis=0).to(tl.float16)\n"),
])
def test_attributes(bad, needle, good):
    refused(bad, needle)
    accepted(good)


def test_patching_imports_is_refused():
    refused("torch.cuda.Event.elapsed_time = None", "patching imported modules")
    refused("triton.testing.do_bench = None", "patching")
    refused("tl.core.knobs.runtime.launch_enter_hook = print", "patching")
    refused("torch.__dict__['load'] = 1", "patching imported modules")


# --- strings Triton's line scanners would read as code -------------------------------------------------
KERNEL_BODY = "    offs = tl.arange(0, N)\n    tl.store(x + offs, tl.load(x + offs) + 1.0)\n"


@pytest.mark.parametrize("bad, needle", [
    # the interpreter execs from the last line starting with `def `: a string in the body holds it
    ('@triton.jit\ndef k(x, N: tl.constexpr):\n    note = """\ndef k(x, N: tl.constexpr):\n    pass\n    # """\n'
     + KERNEL_BODY, "line 6: a string spanning lines 6-9 in Triton function 'k'"),
    # the JIT compiles from the first `def name(` line after the decorator: a string in the decorator holds it
    ('@triton.jit(do_not_specialize=["""\ndef k(x, N: tl.constexpr):\n    pass\n"""])\n'
     'def k(x, N: tl.constexpr):\n' + KERNEL_BODY, "line 4: a string spanning lines 4-7 in Triton function 'k'"),
    # a docstring may span lines, but not hold a `def` line
    ('@triton.jit\ndef k(x, N: tl.constexpr):\n    """Adds one.\ndef k(x, N: tl.constexpr):\n    pass\n    # """\n'
     + KERNEL_BODY, "line 7: a string spanning lines holds a line beginning with 'def '"),
    # an f-string spanning lines in a kernel, and one under autotune
    ('@triton.jit\ndef k(x, N: tl.constexpr):\n    s = f"""{N}\n"""\n' + KERNEL_BODY, "in Triton function 'k'"),
    ('@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=["N"])\n@triton.jit\n'
     'def k(x, N: tl.constexpr):\n    s = """a\nb"""\n' + KERNEL_BODY, "in Triton function 'k'"),
    # a function made a kernel by a call, not a decorator
    ('def body(x, N: tl.constexpr):\n    s = """a\nb"""\n' + KERNEL_BODY + "k = triton.jit(body)\n",
     "in Triton function 'body'"),
    # anywhere in the module: a line beginning with `def ` or `@` inside a string
    ('NOTE = """\n  def hidden(x):\n"""\n', "line 5: a string spanning lines holds a line beginning with 'def '"),
    ('NOTE = """\n@triton.jit\n"""\n', "line 5: a string spanning lines holds a line beginning with 'def ' or '@'"),
])
def test_strings_triton_would_read_as_code_are_refused(bad, needle):
    refused(bad, needle)


def test_ordinary_strings_and_docstrings_pass():
    accepted('"""A module docstring\nover lines, mentioning def and @ mid-line: def f(x) at @triton.jit."""\n'
             '@triton.jit\ndef k(x, N: tl.constexpr):\n    """A kernel\'s docstring,\n    over lines."""\n'
             + KERNEL_BODY
             + 'def launch(x):\n    """Launches k.\n\n    Each row: one program."""\n'
             + '    msg = """a launcher\'s string\nover lines"""\n    k[(1,)](x, 16)\n    return msg\n'
             + '@triton.jit\ndef j(x, N: tl.constexpr):\n    tl.static_assert(N > 0, "N must be positive; "\n'
             + '                     "one line each")\n' + KERNEL_BODY)


def test_vendored_kernel_libraries_are_refused():
    refused("def chunk_local_cumsum():\n    pass\ndef solve_tril():\n    pass\n", "looks vendored from fla")
    refused("# Copyright (c) 2024, Tri Dao.\n", "looks vendored")
    accepted("def local_cumsum():\n    pass\n# Copyright (c) 2026, me\n")


def test_each_refusal_names_its_line():
    found = violations("X = 1\nY = getattr\n")
    assert found == ["line 5: uses 'getattr': " + found[0].split(": ", 2)[2]], found


def test_policy_requires_the_entry_point_valid_syntax_and_a_bounded_size():
    assert any("must define kda" in str(v) for v in check_source(HEADER, "kda"))
    assert any("syntax error" in str(v) for v in check_source("def kda(:\n", "kda"))
    big = HEADER + "X = 1\n" * (MAX_SOURCE_BYTES // 6) + "def kda():\n    pass\n"
    assert any("the limit is" in str(v) for v in check_source(big, "kda"))
    deep = HEADER + "X = 1" + " + 1" * 1000 + "\ndef kda():\n    pass\n"  # one line, 1000 levels of BinOp
    assert any("nests 201 levels deep" in str(v) for v in check_source(deep, "kda"))


def test_runtime_module_check():
    assert module_violation("fla.ops.kda") and module_violation("flash_attn")
    assert module_violation("torch.nn") is None and module_violation("json") is None


def test_tunables_roundtrip():
    source = resolve_kernel(get_problem("mla_decode"), "starter")[1]
    tunables, config = read_tunables(source)
    assert set(config) <= set(tunables) | set(config) and config["BLOCK_S"] in tunables["BLOCK_S"]
    configs = all_configs(tunables)
    assert len(configs) == len({tuple(sorted(c.items())) for c in configs})
    rewritten = with_config(source, configs[-1])
    assert read_tunables(rewritten) == (tunables, configs[-1])
    assert check_source(rewritten, "mla_decode") == []


def test_the_models_instructions_name_what_the_policy_allows():
    """The model is told the allowlist (compaction.prompt.RULES_SUMMARY): every import root the policy
    allows is named there, and a rule the policy enforces is not contradicted."""
    from compaction.prompt import DEFAULT_SYSTEM_PROMPT, RULES_SUMMARY
    from kernels.evaluator import policy
    assert RULES_SUMMARY in DEFAULT_SYSTEM_PROMPT
    for root in policy.IMPORT_ROOTS:
        assert root in RULES_SUMMARY, root
    for refused in ("str.format", "match", "global", "yield", "underscore"):
        assert refused in RULES_SUMMARY, refused
