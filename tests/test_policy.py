"""The static candidate policy."""
import pytest

from kernels.evaluator.policy import check_source, module_violation
from kernels.problems.spec import PROBLEM_NAMES, get_problem, resolve_kernel
from kernels.problems.tunables import all_configs, read_tunables, with_config

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"


def violations(body: str, entry: str = "kda") -> list[str]:
    return [str(v) for v in check_source(HEADER + body + f"\ndef {entry}(*a):\n    return None\n", entry)]


@pytest.mark.parametrize("name", PROBLEM_NAMES)
def test_shipped_kernels_pass(name):
    spec = get_problem(name)
    for kernel in spec.shipped_kernels:
        assert check_source(resolve_kernel(spec, kernel)[1], spec.entry_point) == []


@pytest.mark.parametrize("body, needle", [
    ("import fla", "third-party kernel libraries"),
    ("from fla.ops.kda import chunk_kda", "third-party kernel libraries"),
    ("import flash_attn", "third-party kernel libraries"),
    ("import os", "only"),
    ("import subprocess", "only"),
    ("import ctypes", "only"),
    ("import socket", "only"),
    ("import importlib", "only"),
    ("x = __import__('fla')", "__import__"),
    ("exec('import fla')", "exec"),
    ("eval('1')", "eval"),
    ("f = open('/etc/passwd')", "open"),
    ("x = getattr(torch, 'lo' + 'ad')", "getattr"),
    ("x = torch.__dict__", "dunder"),
    ("x = ().__class__.__base__.__subclasses__()", "dunder"),
    ("torch.cuda.Event.elapsed_time = None", "patching"),
    ("triton.testing.do_bench = None", "patching"),
    ("x = torch.load('ref.pt')", "torch.load"),
    ("f = torch.compile(lambda a: a)", "torch.compile"),
    ("from torch.utils.cpp_extension import load_inline", "cpp_extension"),
    ("from torch import ops", "torch.ops"),
    ("from triton import compiler", "triton.compiler"),
    ("from . import helper", "relative"),
    ("from torch import *", "import *"),
    ("def f():\n    global CACHE", "global"),
])
def test_policy_rejects(body, needle):
    found = violations(body)
    assert found and any(needle in v for v in found), found


def test_policy_accepts_ordinary_kernel_code():
    body = ("import math\nfrom functools import lru_cache\nfrom triton.language.extra import libdevice\n"
            "CONFIG = {'BLOCK': 64}\n"
            "@triton.jit\ndef _k(x, BLOCK: tl.constexpr):\n    tl.store(x + tl.arange(0, BLOCK), 1.0)\n")
    assert violations(body) == []


def test_policy_requires_the_entry_point_and_valid_syntax():
    assert any("must define kda" in str(v) for v in check_source(HEADER, "kda"))
    assert any("syntax error" in str(v) for v in check_source("def kda(:\n", "kda"))


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
