"""The workflow in layers: no module of workflows/ over 400 lines, and no import circle among them (the run
loop imports its layers, never the other way round). Static: reads the sources, starts nothing."""
from __future__ import annotations

import ast
from pathlib import Path

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
MAX_LINES = 400


def _imports(path: Path) -> set[str]:
    """The workflows.* modules a module imports (at any depth of its body)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("workflows.")}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "workflows":
                found |= {f"workflows.{a.name}" for a in node.names}
            elif node.module.startswith("workflows."):
                found.add(node.module)
    modules = {f"workflows.{p.stem}" for p in WORKFLOWS.glob("*.py")}
    return found & modules


def test_no_module_over_the_limit():
    sizes = {p.name: len(p.read_text().splitlines()) for p in WORKFLOWS.glob("*.py")}
    assert all(n <= MAX_LINES for n in sizes.values()), {k: v for k, v in sizes.items() if v > MAX_LINES}


def test_no_import_circle():
    graph = {f"workflows.{p.stem}": _imports(p) for p in WORKFLOWS.glob("*.py")}
    assert graph["workflows.kernel_optimization"] >= {"workflows.run", "workflows.policy", "workflows.islands",
                                                     "workflows.dispatch", "workflows.control", "workflows.target"}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for dep in sorted(graph[module]):
            assert state.get(dep) != "open", "import circle: " + " -> ".join(path + [dep])
            if dep not in state:
                visit(dep, path + [dep])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not any("workflows.kernel_optimization" in deps for deps in graph.values())
