"""Every committed result under bench/results is one ResultRecord (kernels/evaluator/result_record.py)."""
import json
import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from kernels.evaluator.result_record import ResultRecord

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
FILES = sorted(RESULTS.rglob("*.json"))


def test_results_exist_and_live_under_a_hardware_folder():
    assert FILES, "bench/results holds no JSON"
    assert {p.relative_to(RESULTS).parts[0] for p in FILES} <= {"h200", "h100", "cpu"}
    assert all(len(p.relative_to(RESULTS).parts) == 2 for p in FILES)


def test_results_hold_only_records_and_their_readme():
    # raw logs, archives and profiler dumps stay in git history, not in the tree
    others = [p for p in RESULTS.rglob("*") if p.is_file() and p.suffix != ".json" and p.name != "README.md"]
    assert others == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_result_file_matches_the_schema(path):
    record = ResultRecord.model_validate(json.loads(path.read_text()))
    if record.verdict is not None:
        # a built-in problem, a file problem the tree holds (the README's examples), or KernelBench's own
        # file, which the tree never holds: the measurement names it
        problem = record.verdict.problem
        assert (problem in ("mla_decode", "kda") or (ROOT / "docs" / "examples" / f"{problem}.py").is_file()
                or ("KernelBench" in record.measurement and f"{problem}.py" in record.measurement))
    if record.host.gpu not in (None, "cpu"):
        assert path.parent.name in record.host.gpu.lower().replace(" ", "")


def test_schema_rejects_a_record_without_figures_or_unknown_fields():
    host = {"gpu": None, "driver": None, "torch": None, "triton": None, "python": None,
            "baseline_libraries": {}}
    base = {"measurement": "m", "host": host, "command": None, "date": None, "commit": None}
    with pytest.raises(ValidationError):
        ResultRecord.model_validate(base)
    with pytest.raises(ValidationError):
        ResultRecord.model_validate({**base, "figures": {"x": 1}, "when": "yesterday"})
    assert ResultRecord.model_validate({**base, "figures": {"x": 1}}).figures == {"x": 1}


# A path under bench/results that code or docs name: a file or folder that must exist, or a pattern
# whose placeholders (`<hardware>`, `*`) must match one. `name @COMMIT` cites a file an earlier commit
# added (bench/README.md says how to read one), so a path followed by `@COMMIT`, or given as a git
# revision's `COMMIT:path`, need not be in the tree. Inside bench/, `results/...` is the same folder.
MENTION = re.compile(r"(?<![\w./<>*-])(bench/)?results((?:/[\w.<>*-]+)+/?)")
AT_COMMIT = re.compile(r"[`'\"]?\s*@[0-9a-f]{7,40}\b")
REVISION = re.compile(r"(?:\b[0-9a-f]{7,40}|\bCOMMIT):$")
SKIP_DIRS = {"__pycache__", "build", "node_modules"}


def mentioned_results(text: str, in_bench: bool) -> list[tuple[str, bool]]:
    """(path relative to the repository, whether it cites an earlier commit) for each mention."""
    out = []
    for m in MENTION.finditer(text):
        if m.group(1) is None and not in_bench:
            continue
        path = ("bench/results" + m.group(2)).rstrip(".")
        earlier = AT_COMMIT.match(text, m.end()) is not None or REVISION.search(text, max(0, m.start() - 48), m.start()) is not None
        out.append((path, earlier))
    return out


def exists(path: str) -> bool:
    pattern = re.sub(r"<[^>/]*>", "*", path.rstrip("/"))
    return any(ROOT.glob(pattern)) if "*" in pattern else (ROOT / pattern).exists()


def sources() -> list[Path]:
    out = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")]
        out += [Path(folder) / f for f in files if f.endswith((".py", ".md", ".sh"))]
    return [p for p in out if p != Path(__file__).resolve()]  # this file's examples are made up


def test_mentions_are_found_and_earlier_commits_told_apart():
    text = ("see bench/results/h200/README.md, `bench/results/h200/gone.json @abc1234`, bench/results/<hardware>/,\n"
            "bench/results/h200/gone.json. and a sibling's .marathon/bench/x.json; git show abc1234:bench/results/x.json")
    assert mentioned_results(text, in_bench=False) == [
        ("bench/results/h200/README.md", False), ("bench/results/h200/gone.json", True),
        ("bench/results/<hardware>/", False), ("bench/results/h200/gone.json", False), ("bench/results/x.json", True)]
    assert mentioned_results("see results/h200/README.md", in_bench=True) == [("bench/results/h200/README.md", False)]
    assert mentioned_results("see results/h200/README.md", in_bench=False) == []
    assert exists("bench/results/<hardware>/") and exists("bench/results/h200/README.md")
    assert not exists("bench/results/h200/gone.json") and not exists("bench/results/<nothing>.yaml")


def test_every_results_path_named_in_code_and_docs_exists():
    checked, missing = 0, []
    for path in sources():
        rel = path.relative_to(ROOT)
        for name, earlier_commit in mentioned_results(path.read_text(errors="replace"), rel.parts[0] == "bench"):
            checked += 1
            if not earlier_commit and not exists(name):
                missing.append(f"{rel}: {name}")
    assert checked >= 20, checked  # the README alone names more: the scan must be reading the tree
    assert missing == []
