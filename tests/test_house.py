"""The house's rules that a grep can check: benchmarks and tests import the package as a user would
(no edits of the import path), and nothing in the tree speaks of where it was built."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

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
