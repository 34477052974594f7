"""Suites (workflows/suite.py): three file problems as child workflows of one KernelSuite parent on a
real dev server, and the scoring (fast_p, geometric mean) on figures given here."""
from __future__ import annotations

import asyncio
import math
import shutil
import subprocess
import sys
import uuid
from datetime import datetime, timezone

import pytest

from cli.suite import stop_reasons
from cli.tables import suite_report_table
from marathon_support import ROOT, workers
from reports.runs import STARTED_BY, rows_from
from workflows import names
from workflows.models import Budgets, EvalSettings, RunSpec
from workflows.suite import SuiteEntry, SuiteReport, SuiteSpec, score

pytestmark = pytest.mark.timeout(400)
EXAMPLES = ROOT / "docs" / "examples"


def _spec(problem: str, gpu_queue: str, kernel_source: str | None = None) -> RunSpec:
    return RunSpec(problem=problem, problem_source=(EXAMPLES / f"{problem}.py").read_text(),
                   kernel=f"{problem}_kernel.py",
                   source=kernel_source or (EXAMPLES / f"{problem}_kernel.py").read_text(),
                   policy="tuner", budgets=Budgets(max_tool_calls=2), eval=EvalSettings(device="cpu"),
                   gpu_task_queue=gpu_queue)


def test_suite_of_three_runs_as_child_workflows(temporal_server, client, task_queues, tmp_path):
    asyncio.run(_suite(temporal_server.address, client, task_queues, tmp_path))


async def _suite(address: str, client, task_queues, tmp_path) -> None:
    tq, gq = task_queues
    wrong = (EXAMPLES / "rms_norm_kernel.py").read_text().replace("(x * inv * w)", "(x * w)")
    spec = SuiteSpec(runs=[_spec("silu_scale", gq), _spec("rms_norm", gq, wrong), _spec("linear_gelu", gq)],
                     parallel=2)
    parent = f"suite-{uuid.uuid4().hex[:8]}"
    async with workers(client, tq, gq, tmp_path / "artifacts"):
        handle = await client.start_workflow(names.SUITE_WORKFLOW_TYPE, spec, id=parent, task_queue=tq,
                                             result_type=SuiteReport, memo={STARTED_BY: "alice@box"})
        report = await asyncio.wait_for(handle.result(), 360)
        status = {e.problem: e.status for e in report.problems}
        assert status == {"silu_scale": "ok", "rms_norm": "no kernel", "linear_gelu": "ok"}  # its one kernel is wrong
        assert report.fast_p["fast_0"] == pytest.approx(2 / 3, abs=1e-3)
        assert report.fast_p["fast_1"] == 0.0  # the CPU interpreter is far slower than eager
        assert report.geomean_speedup_vs_eager is not None and report.geomean_speedup_vs_eager > 0
        for e in report.problems:  # each run is a child of the suite, with its own history
            desc = await client.get_workflow_handle(e.workflow_id).describe()
            assert desc.workflow_type == names.WORKFLOW_TYPE
            assert desc.raw_description.workflow_execution_info.parent_execution.workflow_id == parent
        # the CLI's table: why each problem's run stopped, from its own result; whose runs they are
        stopped = await stop_reasons(client, report)
        rows = {line.split()[0]: line for line in suite_report_table(report, stopped).splitlines()[2:-1]}
        for e in report.problems:
            assert stopped[e.workflow_id] and stopped[e.workflow_id] in rows[e.problem], rows[e.problem]
        listed = await rows_from(client, f"WorkflowType = '{names.WORKFLOW_TYPE}'", address, datetime.now(timezone.utc))
        assert {r.workflow_id: r.started_by for r in listed if r.workflow_id.startswith(parent)} == {
            e.workflow_id: "alice@box" for e in report.problems}  # a suite's runs: its starter's


def test_scoring():
    def entry(p, status, eager):
        return SuiteEntry(problem=p, workflow_id=p, status=status, speedup_vs_eager=eager)
    report = score("s", [entry("a", "ok", 2.5), entry("b", "ok", 1.2), entry("c", "ok", 0.5),
                         entry("d", "incorrect", 9.0), entry("e", "failed", None)])
    assert report.fast_p == {"fast_0": 0.6, "fast_1": 0.4, "fast_1.5": 0.2, "fast_2": 0.2}
    assert report.geomean_speedup_vs_eager == pytest.approx(round((2.5 * 1.2 * 0.5) ** (1 / 3), 4))
    assert math.isclose(score("s", [entry("a", "failed", None)]).fast_p["fast_0"], 0.0)


def test_suite_cli_bad_input(tmp_path):
    """A folder whose problem lacks its starting candidate, and one with no problems: one line, exit 2."""
    shutil.copy(EXAMPLES / "silu_scale.py", tmp_path / "silu_scale.py")
    for where, says in ((tmp_path, "no starting candidate <name>_kernel.py beside silu_scale.py"),
                        (tmp_path / "nothing-*.py", "no problem files")):
        out = subprocess.run([sys.executable, "marathon.py", "suite", "--problems", str(where), "--device", "cpu"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr
