"""The static policy check: what a candidate's source may import, call and touch.

A candidate is a module of Triton kernels plus a thin torch launcher. Anything that could reach a
third-party kernel library, the file system, processes or the network, or patch the harness, is
rejected before the candidate runs. The sandbox repeats the import check at run time (sys.modules)."""
from __future__ import annotations

import ast
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
)
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
        name = self.qualified(node)
        if name:
            banned = _banned_qualified(name)
            if banned:
                self.flag(node, f"uses {name}: {banned} is not allowed in a candidate")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = node
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.aliases:
                self.flag(node, f"assigns to {name or node.attr}: patching imported modules is not allowed")
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
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    if entry_point not in defined:
        checker.violations.append(PolicyViolation(0, f"the module must define {entry_point}(...) at top level"))
    return checker.violations


def module_violation(name: str) -> str | None:
    """For the run-time check: why a module that appeared in sys.modules is not allowed, or None."""
    root = name.split(".")[0]
    if root in BANNED_KERNEL_LIBRARIES:
        return f"module {name!r} was loaded: third-party kernel libraries are not allowed"
    return None
