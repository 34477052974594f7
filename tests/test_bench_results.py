"""Every committed result under bench/results is one ResultRecord (kernels/evaluator/result_record.py)."""
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from kernels.evaluator.result_record import ResultRecord

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
FILES = sorted(RESULTS.rglob("*.json"))


def test_results_exist_and_live_under_a_hardware_folder():
    assert FILES, "bench/results holds no JSON"
    assert {p.relative_to(RESULTS).parts[0] for p in FILES} <= {"h200", "cpu"}
    assert all(len(p.relative_to(RESULTS).parts) == 2 for p in FILES)


def test_results_hold_only_records_and_their_readme():
    # raw logs, archives and profiler dumps stay in git history, not in the tree
    others = [p for p in RESULTS.rglob("*") if p.is_file() and p.suffix != ".json" and p.name != "README.md"]
    assert others == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_result_file_matches_the_schema(path):
    record = ResultRecord.model_validate(json.loads(path.read_text()))
    if record.verdict is not None:
        # a built-in problem, or a file problem the tree holds (the README's examples)
        problem = record.verdict.problem
        assert problem in ("mla_decode", "kda") or (ROOT / "docs" / "examples" / f"{problem}.py").is_file()
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
