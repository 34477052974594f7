"""The static policy check: what a candidate's source may import, call and touch.

A candidate is a module of Triton kernels plus a thin torch launcher. Anything that could reach a
third-party kernel library, the file system, processes or the network, or patch the harness, is
rejected before the candidate runs. The sandbox repeats the import check at run time (sys.modules)."""
from __future__ import annotations

import ast
import importlib
import types
from dataclasses import dataclass

MAX_SOURCE_BYTES = 256 * 1024

# Third-party kernel libraries: wrapping one is not writing the kernel.
BANNED_KERNEL_LIBRARIES = frozenset({
    "fla", "flash_attn", "flash_attn_interface", "xformers", "flashinfer", "flash_mla", "flashmla",
    "liger_kernel", "sgl_kernel", "vllm", "deep_gemm", "apex", "transformer_engine", "cutlass",
    "tilelang", "thunderkittens", "unsloth", "bitsandbytes", "mamba_ssm", "causal_conv1d", "kernels",
})
# Modules a candidate may import (their root name).
ALLOWED_IMPORT_ROOTS = frozenset({
    "torch", "triton", "math", "functools", "itertools", "operator", "typing", "dataclasses",
    "collections", "enum", "numbers", "abc", "__future__", "fractions", "statistics",
})
# Qualified names under allowed roots that do I/O, load native code, compile with another
# generator or reach the harness.
BANNED_QUALIFIED = (
    "torch.load", "torch.save", "torch.from_file", "torch.compile", "torch.ops", "torch.library",
    "torch.utils.cpp_extension", "torch.utils.data", "torch.hub", "torch._dynamo", "torch._inductor",
    "torch._C", "torch.multiprocessing", "torch.distributed", "torch.cuda.nvtx", "torch.classes",
    "torch.backends", "torch.jit", "torch.export", "torch.package", "torch.utils._python_dispatch",
    "torch.overrides", "torch.testing",
    "triton.compile", "triton.compiler", "triton.runtime.jit", "triton.runtime.cache",
    "triton.runtime.build", "triton.runtime.interpreter", "triton.knobs", "triton.tools",
    "torch.cuda.memory._record_memory_history", "torch.cuda.cudart",
    # I/O, harness internals, and the routes around the sandbox's checks
    "torch.serialization", "torch.utils.benchmark", "torch.profiler", "torch.autograd.profiler",
    "torch.cuda.memory", "torch.cuda.set_per_process_memory_fraction", "torch.cuda.caching_allocator_alloc",
    "torch.cuda.graph", "torch.cuda.graphs", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables",
    "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream", "torch.cuda.set_stream",
    "torch.cuda.streams", "torch.Stream", "torch.cuda.StreamContext", "torch.futures", "torch.utils.hooks",
    "triton.testing", "triton.set_allocator",
    "operator.attrgetter", "operator.methodcaller", "typing.get_type_hints", "typing.ForwardRef",
    "functools.singledispatch",
)
# Modules a candidate may never reach, by an import or as an attribute of an allowed one
# (torch.os, typing.sys, triton.runtime.build.subprocess, ...).
DANGEROUS_MODULE_NAMES = frozenset({
    "os", "sys", "subprocess", "ctypes", "socket", "ssl", "builtins", "importlib", "inspect", "gc",
    "shutil", "pathlib", "io", "signal", "atexit", "threading", "_thread", "multiprocessing",
    "concurrent", "asyncio", "pickle", "marshal", "tempfile", "glob", "mmap", "resource", "fcntl",
    "select", "selectors", "urllib", "http", "requests", "platform", "sysconfig", "site", "runpy",
    "pkgutil", "types", "traceback", "linecache", "codecs", "posix", "pty", "weakref", "ftplib",
    "smtplib", "telnetlib", "xmlrpc", "zipimport", "code", "codeop", "dis", "tracemalloc", "faulthandler",
})
# Attribute names that are introspection or I/O on any object (frames, numpy file writes).
BANNED_ATTRIBUTES = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code",
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next", "co_code",
    "co_consts", "func_globals", "func_code", "im_func", "im_self", "numpy", "tofile", "fromfile",
    "from_file", "share_memory_", "register_forward_hook", "register_hook", "add_pre_run_hook",
}) | DANGEROUS_MODULE_NAMES
# Identifiers characteristic of third-party kernel libraries: source pasted in ("vendored") from
# them is as much a wrapper as an import. Two distinct hits, or one library header, reject a source.
VENDORED_SIGNATURES = {
    "fla (flash-linear-attention)": frozenset({
        "chunk_kda_fwd_kernel_intra_sub_inter", "chunk_kda_fwd_kernel_intra_sub_intra", "chunk_kda_fwd_intra",
        "chunk_kda_fwd_intra_token_parallel", "chunk_kda_bwd_kernel_intra", "chunk_gated_delta_rule_fwd_kernel_h",
        "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "chunk_gated_delta_rule_fwd_h", "recompute_w_u_fwd",
        "recompute_w_u_fwd_kernel", "chunk_gla_fwd_o_gk", "chunk_gla_fwd_kernel_o", "chunk_fwd_kernel_o",
        "fused_recurrent_kda_fwd_kernel", "fused_recurrent_gated_delta_rule_fwd_kernel", "chunk_local_cumsum",
        "chunk_local_cumsum_vector_kernel", "chunk_local_cumsum_scalar_kernel", "solve_tril",
        "solve_tril_16x16_kernel", "merge_16x16_to_64x64_inverse_kernel", "prepare_chunk_indices",
        "prepare_chunk_offsets", "autotune_cache_kwargs", "input_guard", "kda_gate_fwd_kernel",
        "chunk_kda_fwd", "ChunkKDAFunction",
    }),
    "sglang / vllm (Triton decode attention)": frozenset({
        "_fwd_grouped_kernel_stage1", "_fwd_kernel_stage1", "_fwd_kernel_stage2", "_decode_softmax_reducev_fwd",
        "_decode_grouped_att_m_fwd", "_decode_att_m_fwd", "decode_attention_fwd_grouped",
        "decode_attention_fwd_normal", "decode_attention_fwd", "Req_to_tokens", "B_Seqlen", "Att_Out",
    }),
    "flash-attention (Triton)": frozenset({
        "_flash_attn_forward", "_flash_attn_backward", "flash_attn_func", "flash_attn_with_kvcache",
        "_bwd_preprocess_do_o_dot", "_bwd_kernel_one_col_block",
    }),
}
# A copyright or licence line naming one of these is a pasted file's header.
VENDORED_HEADERS = ("Songlin Yang", "Yu Zhang", "flash-linear-attention", "fla-org", "Tri Dao",
                    "SGLang Team", "vLLM Team", "vLLM project", "FlashInfer", "sgl-project", "vllm-project")
BANNED_BUILTINS = frozenset({
    "exec", "eval", "compile", "__import__", "open", "getattr", "setattr", "delattr", "globals",
    "locals", "vars", "breakpoint", "input", "exit", "quit", "help", "memoryview", "__builtins__",
    "__loader__", "__spec__", "__file__", "__cached__",
})
ALLOWED_DUNDER_ATTRS = frozenset({"__init__", "__name__", "__doc__", "__call__", "__len__"})


@dataclass
class PolicyViolation:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def _banned_qualified(name: str) -> str | None:
    for banned in BANNED_QUALIFIED:
        if name == banned or name.startswith(banned + "."):
            return banned
    return None


def _resolved_problem(name: str) -> str | None:
    """Follow an attribute chain rooted at an allowed module (torch.cuda.x, typing.y) in this
    process: a step that is private, or that lands on a module outside the allowlist, is a route
    around the import check."""
    parts = name.split(".")
    if parts[0] not in ALLOWED_IMPORT_ROOTS:
        return None
    for part in parts[1:]:
        if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
            return f"uses {name}: private attributes of allowed modules are not allowed"
    try:
        obj = importlib.import_module(parts[0])
    except Exception:  # noqa: BLE001 - not importable here: the run-time checks take over
        return None
    path = parts[0]
    for part in parts[1:]:
        path = f"{path}.{part}"
        try:
            obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - a missing attribute fails at run time, harmlessly
            return None
        if isinstance(obj, types.ModuleType):
            module = obj.__name__
            if module.split(".")[0] not in ALLOWED_IMPORT_ROOTS:
                return f"uses {name}: {path} is the module {module!r}, which a candidate may not use"
            banned = _banned_qualified(module)
            if banned:
                return f"uses {name}: {path} is {module}, and {banned} is not allowed in a candidate"
    return None


def _import_problem(module: str) -> str | None:
    root = module.split(".")[0]
    if root in BANNED_KERNEL_LIBRARIES:
        return f"imports {module!r}: third-party kernel libraries are not allowed; write the kernel in Triton"
    if root not in ALLOWED_IMPORT_ROOTS:
        return (f"imports {module!r}: only {', '.join(sorted(ALLOWED_IMPORT_ROOTS - {'__future__'}))} "
                "may be imported")
    banned = _banned_qualified(module)
    if banned:
        return f"imports {module!r}: {banned} is not allowed in a candidate"
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.violations: list[PolicyViolation] = []
        self.aliases: dict[str, str] = {}  # local name -> qualified module or object
        self.resolved: set[str] = set()

    def flag(self, node: ast.AST, message: str) -> None:
        self.violations.append(PolicyViolation(getattr(node, "lineno", 0), message))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            problem = _import_problem(alias.name)
            if problem:
                self.flag(node, problem)
            local = alias.asname or alias.name.split(".")[0]
            self.aliases[local] = alias.name if alias.asname else alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(node, "relative imports are not allowed: a candidate is a single module")
            return
        module = node.module or ""
        problem = _import_problem(module)
        if problem:
            self.flag(node, problem)
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, f"'from {module} import *' is not allowed: name what you use")
                continue
            qualified = f"{module}.{alias.name}"
            banned = _banned_qualified(qualified)
            if banned and not problem:
                self.flag(node, f"imports {qualified!r}: {banned} is not allowed in a candidate")
            self.aliases[alias.asname or alias.name] = qualified

    def qualified(self, node: ast.AST) -> str | None:
        """torch.cuda.x for an Attribute chain rooted at an imported name, else None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id], *reversed(parts)])
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ALLOWED_DUNDER_ATTRS:
            self.flag(node, f"attribute {node.attr!r}: dunder attributes are not allowed")
        elif node.attr in BANNED_ATTRIBUTES:
            self.flag(node, f"attribute {node.attr!r}: introspection, I/O and system modules are not allowed")
        name = self.qualified(node)
        if name:
            banned = _banned_qualified(name)
            if banned:
                self.flag(node, f"uses {name}: {banned} is not allowed in a candidate")
            elif not isinstance(node.ctx, (ast.Store, ast.Del)) and name not in self.resolved:
                self.resolved.add(name)
                problem = _resolved_problem(name)
                if problem:
                    self.flag(node, problem)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = node
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.aliases:
                self.flag(node, f"assigns to {name or node.attr}: patching imported modules is not allowed")
            elif not (isinstance(root, ast.Name) and root.id == "self"):
                self.flag(node, f"assigns to attribute {node.attr!r}: patching objects is not allowed "
                          "(only self.<name> inside a class of the candidate's own)")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        # `m = torch.cuda` makes m an alias of torch.cuda, so that m.x is checked as torch.cuda.x
        name = self.qualified(node.value) if isinstance(node.value, (ast.Attribute, ast.Name)) else None
        self.generic_visit(node)
        if name:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.aliases[target.id] = name

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = node.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.aliases:
                self.flag(node, "assigns into an imported module's object: patching imported modules is not allowed")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_BUILTINS:
            self.flag(node, f"uses {node.id!r}: not allowed in a candidate")
        name = self.aliases.get(node.id)
        if name and _banned_qualified(name):
            self.flag(node, f"uses {name}: not allowed in a candidate")

    def visit_Global(self, node: ast.Global) -> None:
        self.flag(node, "'global' is not allowed: a candidate keeps no state between calls")


def check_source(source: str, entry_point: str) -> list[PolicyViolation]:
    """Every policy violation in `source`, or [] if it may run."""
    if len(source.encode()) > MAX_SOURCE_BYTES:
        return [PolicyViolation(0, f"source is {len(source.encode())} bytes; the limit is {MAX_SOURCE_BYTES}")]
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [PolicyViolation(exc.lineno or 0, f"syntax error: {exc.msg}")]
    checker = _Checker()
    checker.visit(tree)
    checker.violations += _vendored(source, tree)
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    if entry_point not in defined:
        checker.violations.append(PolicyViolation(0, f"the module must define {entry_point}(...) at top level"))
    return checker.violations


def _vendored(source: str, tree: ast.Module) -> list[PolicyViolation]:
    """Source pasted in from a third-party kernel library: its identifiers and headers give it away."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)
    out = []
    for library, signature in VENDORED_SIGNATURES.items():
        hits = sorted(names & signature)
        if len(hits) >= 2:
            out.append(PolicyViolation(0, f"looks vendored from {library} (identifiers {', '.join(hits[:6])}): "
                                          "pasting a library's kernels in is wrapping it; write your own"))
    comments = [line for line in source.splitlines()
                if line.lstrip().startswith("#") and ("Copyright" in line or "SPDX" in line or "(c)" in line)]
    header = next((h for h in VENDORED_HEADERS for line in comments if h in line), None)
    if header:
        out.append(PolicyViolation(0, f"looks vendored: a copyright line names {header!r}, of a kernel library; "
                                      "pasting a library's kernels in is wrapping it"))
    return out


def module_violation(name: str) -> str | None:
    """For the run-time check: why a module that appeared in sys.modules is not allowed, or None."""
    root = name.split(".")[0]
    if root in BANNED_KERNEL_LIBRARIES:
        return f"module {name!r} was loaded: third-party kernel libraries are not allowed"
    return None
