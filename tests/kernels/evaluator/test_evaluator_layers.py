"""The evaluator by process (kernels/evaluator/__init__.py): no import circle in kernels/, the front door
torch-free, the sandboxes without the judge, kernels/ without Temporal, one libc loader and one place that
sets the parent-death signal. Static: reads the sources, starts nothing."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ROOT / "kernels"
EVALUATOR = KERNELS / "evaluator"
FRONT_DOOR = ["evaluate", "confinement", "verdict", "baseline_cache", "result_record", "roofline", "fence_drills",
              "isolation"]
SANDBOXES = ["candidate_process", "problem_process", "contained"]
HEAVY = {"torch", "triton", "temporalio", "numpy"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in KERNELS.rglob("*.py")
            if "__pycache__" not in p.parts and "hostile_drills" not in p.parts}


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """Every module name imported (kernels.* resolved to modules; others by their first part). With
    top_level_only, the imports that run when the module is imported (not those inside functions)."""
    tree = ast.parse(path.read_text())
    nodes = []
    if top_level_only:
        stack = list(tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            nodes.append(node)
            stack.extend(ast.iter_child_nodes(node))
    else:
        nodes = list(ast.walk(tree))
    known = _modules()
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name if a.name in known else a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                found.add(full if full in known else (node.module if node.module in known else node.module.split(".")[0]))
    return found


def _closure(start: str, top_level_only: bool = True) -> set[str]:
    known = _modules()
    seen, todo = set(), [start]
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        if mod in known:
            todo.extend(_imports(known[mod], top_level_only))
    return seen


def test_every_module_is_placed_in_a_process():
    doc = ast.get_docstring(ast.parse((EVALUATOR / "__init__.py").read_text()))
    for path in EVALUATOR.glob("*.py"):
        if path.stem != "__init__":
            assert f"`{path.name}`" in doc, f"kernels/evaluator/__init__.py does not say where {path.name} runs"
    for folder in ("fence_probe", "hostile_drills"):
        assert f"`{folder}/`" in doc


def test_no_import_circle_through_the_evaluator():
    """No circle of imports (lazy ones included) that passes through kernels/evaluator/, whether it stays in
    the folder or leaves it through kernels/problems/ or kernels/settings.py."""
    known = _modules()
    graph = {m: {d for d in _imports(p, top_level_only=False) if d in known and d != m} for m, p in known.items()}
    for start in sorted(m for m in known if m.startswith("kernels.evaluator.")):
        # a path from a module back to itself is a circle
        seen, todo = set(), [(d, [start, d]) for d in graph[start]]
        while todo:
            module, path = todo.pop()
            assert module != start, "import circle: " + " -> ".join(path)
            if module not in seen:
                seen.add(module)
                todo.extend((d, path + [d]) for d in graph[module])


def test_the_front_door_is_torch_free():
    for name in FRONT_DOOR + ["kernels.settings"]:
        module = name if name.startswith("kernels.") else f"kernels.evaluator.{name}"
        heavy = _closure(module) & HEAVY
        assert not heavy, f"importing {module} imports {sorted(heavy)}"


def test_the_protocol_imports_pydantic_and_the_standard_library_only():
    """The one module the judge and the sandboxes share about what they say: nothing of the evaluator's."""
    imported = _imports(EVALUATOR / "protocol.py", top_level_only=False)
    assert imported <= set(sys.stdlib_module_names) | {"pydantic"}, sorted(imported)


def test_the_tensor_file_imports_torch_and_the_standard_library_only():
    """The format the sandboxes write and the judge reads: nothing of either side's."""
    imported = _imports(EVALUATOR / "tensor_file.py", top_level_only=False)
    assert imported <= set(sys.stdlib_module_names) | {"torch"}, sorted(imported)


def test_the_sandboxes_import_neither_the_judge_nor_the_front_door():
    for name in SANDBOXES:
        reached = _closure(f"kernels.evaluator.{name}", top_level_only=False)
        assert not reached & {"kernels.evaluator.judge", "kernels.evaluator.evaluate"}, (name, sorted(reached))


def test_kernels_know_nothing_of_temporal_or_the_run():
    for module, path in _modules().items():
        outside = _imports(path, top_level_only=False) & {"temporalio", "workflows", "activities", "serving", "cli",
                                                         "reports", "compaction", "worker", "tasks"}
        assert not outside, (module, outside)


def test_one_libc_loader_and_one_parent_death_setter():
    product = [p for d in ("kernels", "activities", "serving", "tasks", "workflows", "cli", "reports") for p in
               (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts and "hostile_drills" not in p.parts]
    product += [ROOT / "worker.py", ROOT / "marathon.py"]
    loader = re.compile(r"CDLL\(\s*(None|[\"']libc)")
    libc = [str(p.relative_to(ROOT)) for p in product if loader.search(p.read_text())]
    assert libc == ["kernels/evaluator/isolation.py"], libc
    pdeath = [str(p.relative_to(ROOT)) for p in product
              if re.search(r"prctl\(\s*(PR_SET_PDEATHSIG|1\s*,)", p.read_text())]
    assert pdeath == ["kernels/evaluator/isolation.py"], pdeath
    text = (EVALUATOR / "isolation.py").read_text()
    assert len(re.findall(r"prctl\(\s*PR_SET_PDEATHSIG", text)) == 1  # inside set_parent_death_signal


def test_one_environment_allowlist_module():
    """The names a process's environment may carry are listed in confinement.py and nowhere else."""
    allowlists = re.compile(r"^\s*[A-Z_]*(ENV_PREFIXES|ENV_NAMES|SECRET_WORDS)\s*=", re.M)
    found = [str(p.relative_to(ROOT)) for p in KERNELS.rglob("*.py") if allowlists.search(p.read_text())]
    assert found == ["kernels/evaluator/confinement.py"], found
