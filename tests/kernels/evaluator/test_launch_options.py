"""The launch keywords the sandbox lets through: a kernel's parameters and the launch settings, nothing
that reaches Triton's compiler. The shipped kernels' GPU-only launch settings (a programmatic dependent
launch) never run on the CPU, so the check that they stay allowed reads their source."""
import ast
import importlib
from pathlib import Path

import pytest

from kernels.evaluator import candidate_process, protocol

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted(ROOT.glob("kernels/problems/*/tuned.py")) + sorted(ROOT.glob("kernels/problems/*/starter.py")) \
    + sorted(ROOT.glob("docs/examples/*_kernel.py")) + sorted(ROOT.glob("bench/candidates/*.py"))


class _Kernel:
    arg_names = ["x_ptr", "n", "BLOCK"]


def test_parameters_and_launch_settings_pass_compile_options_do_not():
    kwargs = {"x_ptr": 0, "BLOCK": 64, "grid": (1,), "warmup": False, "num_warps": 4, "num_stages": 2,
              "launch_pdl": True, "launch_cooperative_grid": False, "maxnreg": 128, "num_ctas": 1}
    assert candidate_process._options(_Kernel(), kwargs) == []
    bad = {**kwargs, "ir_override": "/tmp/x.ttgir", "extern_libs": {"m": "/tmp/m.bc"}, "ptx_options": "-v",
           "debug": True}
    assert candidate_process._options(_Kernel(), bad) == ["debug", "extern_libs", "ir_override", "ptx_options"]
    # a kernel object without parameter names (not a JITFunction) lets only the settings through
    assert candidate_process._options(object(), {"BLOCK": 64, "num_warps": 4}) == ["BLOCK"]


def _dict_keys(node: ast.AST, assigned: dict[str, list[ast.AST]]) -> set[str]:
    """The keys a `**` argument can hold: a dict literal's, either branch of a conditional's, or those of
    what a local name was assigned. Anything this cannot read counts as a keyword nobody allowed."""
    if isinstance(node, ast.Dict):
        return {k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else "<a computed key>"
                for k in node.keys}
    if isinstance(node, ast.IfExp):
        return _dict_keys(node.body, assigned) | _dict_keys(node.orelse, assigned)
    if isinstance(node, ast.Name) and node.id in assigned:
        return set().union(*(_dict_keys(value, assigned) for value in assigned[node.id]))
    return {f"<**{ast.unparse(node)}>"}


def _launch_keywords(path: Path) -> list[tuple[str, str, int]]:
    """(kernel name, keyword, line) for every keyword of every `kernel[grid](...)` launch in the file."""
    tree = ast.parse(path.read_text())
    out = []
    for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Module))]:
        assigned: dict[str, list[ast.AST]] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        assigned.setdefault(target.id, []).append(node.value)
        for node in ast.walk(func):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
                    and isinstance(node.func.value, ast.Name)):
                for kw in node.keywords:
                    names = {kw.arg} if kw.arg else _dict_keys(kw.value, assigned)
                    out += [(node.func.value.id, name, node.lineno) for name in names]
    return out


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_launch_keyword_is_allowed(path):
    """Every keyword a shipped or example kernel passes at a launch, on any device, is one of the kernel's
    parameters or a launch setting: on a GPU the sandbox would otherwise refuse the honest kernel."""
    spec = importlib.util.spec_from_file_location(f"shipped_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = _launch_keywords(path)
    assert found or "starter" in path.name or "_kernel" in path.name or path.parent.name == "candidates"
    refused = [(k, name, line) for k, name, line in found
               if candidate_process._options(getattr(module, k, None), {name: None})]
    assert not refused, f"{path.name}: launch keywords the sandbox refuses: {refused}"


def test_the_tuned_kernels_pdl_launch_is_seen_by_the_check():
    """The source check above reaches the keywords passed through a `**dict`: it finds launch_pdl."""
    found = {name for path in ROOT.glob("kernels/problems/*/tuned.py") for _, name, _ in _launch_keywords(path)}
    assert "launch_pdl" in found
    assert protocol.LAUNCH_OPTIONS >= {"launch_pdl", "num_warps", "num_stages"}
