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
from pathlib import Path

import pytest

from cli.suite import stop_reasons
from cli.tables import CPU_LINE, suite_report_table
from marathon_support import ROOT, load_test_module, workers
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
        assert report.fast_p["fast_1"] == 0.0  # a CPU interpreter's speedups are noise: none counts as fast
        assert report.geomean_speedup_vs_eager is not None and report.geomean_speedup_vs_eager > 0
        for e in report.problems:  # each run is a child of the suite, with its own history
            desc = await client.get_workflow_handle(e.workflow_id).describe()
            assert desc.workflow_type == names.WORKFLOW_TYPE
            assert desc.raw_description.workflow_execution_info.parent_execution.workflow_id == parent
        # the CLI's table: why each problem's run stopped, from its own result; whose runs they are
        stopped = await stop_reasons(client, report)
        table = suite_report_table(report, stopped)
        assert CPU_LINE in table.splitlines()[1]  # the CPU's interpreter: its speedups are noise, said first
        rows = {line.split()[0]: line for line in table.splitlines()[3:-1]}
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
    assert report.geomean_speedup_vs_eager == float(f"{(2.5 * 1.2 * 0.5) ** (1 / 3):.4g}")  # four figures
    assert math.isclose(score("s", [entry("a", "failed", None)]).fast_p["fast_0"], 0.0)
    noise = SuiteEntry(problem="f", workflow_id="f", status="ok", speedup_vs_eager=3.0, timing_meaningful=False)
    assert score("s", [noise]).fast_p == {"fast_0": 1.0, "fast_1": 0.0, "fast_1.5": 0.0, "fast_2": 0.0}


def test_an_interpreters_tiny_speedups_are_kept_to_four_figures():
    """On a CPU speedups over eager are ~1e-5: kept as measured (not rounded to 0), so each counts in the
    geometric mean."""
    from types import SimpleNamespace

    from kernels.evaluator.verdict import ShapeResult, Verdict
    from workflows.suite import entry_from_report

    def run(eager):
        verdict = Verdict(status="ok", reason="", problem="p", kernel="k", device="cpu",
                          shapes=[ShapeResult(shape={"n": 1}, correct=True, speedup={"eager": eager, "compile": 0.93412})])
        return SimpleNamespace(best=SimpleNamespace(attempt=0, verdict=verdict), stop_reason="budget")
    entries = [entry_from_report(p, p, run(x)) for p, x in (("a", 0.0000285123), ("b", 0.000243))]
    assert [e.speedup_vs_eager for e in entries] == [0.00002851, 0.000243]
    assert entries[0].speedups["compile"] == 0.9341 and entries[0].stop_reason == "budget"
    assert score("s", entries).geomean_speedup_vs_eager == pytest.approx((0.00002851 * 0.000243) ** 0.5, rel=1e-3)


def test_suite_cli_bad_input(tmp_path):
    """A folder whose problem lacks its starting candidate, and one with no problems: one line, exit 2."""
    shutil.copy(EXAMPLES / "silu_scale.py", tmp_path / "silu_scale.py")
    for where, says in ((tmp_path, "no starting candidate <name>_kernel.py beside silu_scale.py"),
                        (tmp_path / "nothing-*.py", "no problem files")):
        out = subprocess.run([sys.executable, "marathon.py", "suite", "--problems", str(where), "--device", "cpu"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr


def _suite_folder(tmp_path):
    """Three KernelBench-format files of these tests' own, each with its candidate beside it."""
    kb = load_test_module("test_kernelbench")
    HONEST, PATTERNS, PATTERNS_KERNEL, RELU_KERNEL, SOFTPLUS, TUPLE_SIZES = (
        kb.HONEST, kb.PATTERNS, kb.PATTERNS_KERNEL, kb.RELU_KERNEL, kb.SOFTPLUS, kb.TUPLE_SIZES)
    folder = tmp_path / "problems"
    folder.mkdir()
    for name, problem, kernel in (("patterns", PATTERNS, PATTERNS_KERNEL),
                                  ("tuple_sizes", TUPLE_SIZES, RELU_KERNEL.replace("SCALE", "2.0")),
                                  ("softplus", SOFTPLUS, HONEST)):
        (folder / f"{name}.py").write_text(problem)
        (folder / f"{name}_kernel.py").write_text(kernel)
    return folder


def test_a_shape_applies_to_the_files_that_have_its_names(tmp_path):
    """One --shape over a mixed folder: each file takes the names it has, the others keep their own
    shapes; a name no file has is refused in one line."""
    from cli.suite import suite_spec_from_args
    from marathon import build_parser
    folder = _suite_folder(tmp_path)
    args = build_parser().parse_args(["suite", "--problems", str(folder), "--device", "cpu", "--dtype", "float16",
                                      "--shape", "batch=3,rows=5", "--shape", "cols=7,input_shape[0]=9"])
    spec = suite_spec_from_args(args)
    lists = {r.problem: r.eval.shape_list for r in spec.runs}
    assert lists == {"patterns": [{"batch": 3, "rows": 5}, {"cols": 7}], "softplus": [{"rows": 5}, {"cols": 7}],
                     "tuple_sizes": [{"input_shape[0]": 9}]}
    assert {r.eval.dtype for r in spec.runs} == {"float16"}
    out = subprocess.run([sys.executable, "marathon.py", "suite", "--problems", str(folder), "--device", "cpu",
                          "--shape", "batch=3,widht=4"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.strip() == (f"marathon suite: --shape names widht, which no problem of "
                                                          f"{str(folder)!r} has")


@pytest.mark.timeout(900)
def test_a_suite_of_raw_files_on_the_cpu_is_listed_and_reported(tmp_path):
    """`marathon suite` over a folder of files without SMOKE_SHAPES, on the CPU, no --shape: each file's
    process chooses its small sizes; it exits 0; `marathon runs` lists the suite; `marathon report
    SUITE_ID` writes its report.html with fast_p and a row per problem linking its run's report."""
    import json
    folder, state = _suite_folder(tmp_path), tmp_path / "state"
    out = subprocess.run([sys.executable, "marathon.py", "suite", "--problems", str(folder), "--device", "cpu",
                          "--max-tool-calls", "2", "--state-dir", str(state), "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=800)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    suite_id = report["workflow_id"]
    assert {e["problem"]: e["status"] for e in report["problems"]} == {
        "patterns": "ok", "softplus": "ok", "tuple_sizes": "ok"}
    assert all(e["stop_reason"] for e in report["problems"])
    listed = subprocess.run([sys.executable, "marathon.py", "runs", "--state-dir", str(state), "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    rows = {r["workflow_id"]: r for r in json.loads(listed.stdout)}
    assert rows[suite_id]["problem"] == "suite of 3" and rows[suite_id]["status"] == "COMPLETED"
    assert {e["workflow_id"] for e in report["problems"]} <= set(rows)
    shutil.rmtree(state / "reports")
    written = subprocess.run([sys.executable, "marathon.py", "report", suite_id, "--state-dir", str(state)],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert written.returncode == 0, written.stderr
    html = Path(written.stdout.strip())
    assert html == state / "reports" / suite_id / "report.html" and html.is_file()
    page = html.read_text()
    assert "fast_1.5" in page and "geometric-mean speedup vs eager" in page
    assert 'id="cpu-banner"' in page  # the interpreter's speedups are noise, and the page says so first
    for e in report["problems"]:
        link = next(line for line in page.splitlines() if f">{e['workflow_id']}</a>" in line)
        target = (html.parent / link.split('href="')[1].split('"')[0]).resolve()
        assert target.is_file() and e["workflow_id"] in target.read_text()
        assert e["stop_reason"].split(":")[0] in page


def test_runs_lists_suites_beside_runs_and_only_runs_for_a_problem():
    """`marathon runs` asks for runs and suites; asked for one problem's, only runs (a suite has none)."""
    from reports.runs import visibility_query
    now = datetime(2026, 1, 2, tzinfo=timezone.utc)
    every = visibility_query(None, None, now)
    assert f"WorkflowType = '{names.SUITE_WORKFLOW_TYPE}'" in every and f"WorkflowType = '{names.WORKFLOW_TYPE}'" in every
    one = visibility_query("softplus", None, now)
    assert names.SUITE_WORKFLOW_TYPE not in one and "'softplus'" in one
