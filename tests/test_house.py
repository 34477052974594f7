"""The house's rules that a grep can check: benchmarks and tests import the package as a user would
(no edits of the import path), nothing in the tree speaks of where it was built, the workflow stays in
short layers and neither it nor the evaluator imports in a circle."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


def test_bench_and_tests_leave_the_import_path_alone():
    edit = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend)\b|\[|[+]?=)")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in tracked("bench/*.py", "tests/*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if edit.search(line)]
    assert found == []


def test_nothing_says_where_it_was_built():
    words = re.compile("|".join(["work" + "place", "KIN" + r"DS\.md", r"\.\./" + "shared", "machine " + "booking"]),
                       re.IGNORECASE)
    texts = [p for p in tracked() if p.suffix in {".py", ".md", ".toml", ".txt", ".j2", ".sh", ".json", ".cfg", ""}]
    found = [str(p.relative_to(ROOT)) for p in texts if words.search(p.read_text(errors="replace"))]
    assert found == []


def test_tests_mirror_the_source_folders():
    """A module's tests sit in the folder of the same path under tests/ (tests/kernels/evaluator/ for
    kernels/evaluator/); only the house-wide checks sit in tests/ itself."""
    top_level = {"test_house.py"}
    misplaced = []
    for p in tracked("tests/*.py"):
        if not p.name.startswith("test_"):
            continue
        folder = p.parent.relative_to(ROOT / "tests")
        if folder == Path(".") and p.name in top_level:
            continue
        if folder == Path(".") or not any((ROOT / folder).glob("*.py")):
            misplaced.append(str(p.relative_to(ROOT)))
    assert misplaced == []


def test_workflow_files_stay_short():
    """The workflow in layers: no file in workflows/ over 400 lines."""
    long = {str(p.relative_to(ROOT)): n for p in tracked("workflows/*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def _imports(package: str) -> dict[str, set[str]]:
    """Each module of `package` (a folder) and the modules of the same folder it imports, at any depth
    of its code (a function's import counts: it is a dependency all the same)."""
    modules = {}
    for p in tracked(f"{package}/*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = p
    graph = {}
    for name, p in modules.items():
        try:
            tree = ast.parse(p.read_text())
        except SyntaxError:  # a template (the hostile drills' sources), not a module
            continue
        named = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named.add(node.module)
                named.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[name] = {m for m in named if m in modules and m != name}
    return graph


@pytest.mark.parametrize("package", ["workflows", "kernels/evaluator"])
def test_no_import_circle(package):
    graph = _imports(package)
    assert graph, package
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
