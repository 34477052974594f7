"""The morning after: `marathon report` and `marathon runs` against real dev servers.

A scripted LLM run (a wrong kernel, a right one, a rate-limited model call) is made on a server whose
database sits in a state directory laid out as an embedded `marathon run` leaves it; the directory is
then copied, as one brought back from a GPU host, and reported from with the CLI alone. Three short runs
of two problems on the `temporal_server` fixture give `marathon runs`, a run still going and a run whose
every attempt failed."""
from __future__ import annotations

import asyncio
import csv
import html as markup
import json
import re
import shutil
import subprocess
import sys

import pytest

from serving.dev_server import DevServer
from activities.artifacts import ArtifactStore
from docs.report_screenshot import browser, dump_dom, screenshot
from serving.scripted_model import FakeOpenAI, completion, error
from kernels.problems.spec import resolve_problem
from marathon_support import ROOT, STARTER_MLA, mla_variant, mla_wrong, queues, start, workers
from reports import local
from reports.collect import ReportError, collect
from reports.make import write_for
from reports.runs import list_runs
from workflows.models import Budgets, EvalSettings, ModelSettings, RunSpec, RunStatus

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

RUN_ID = "mla-scripted-report"
BEST = mla_variant(BLOCK_S=32)
REJECTED = STARTER_MLA.replace("import torch", "import os\nimport torch", 1)  # os: refused by the policy


def script(turn: int, delivery: int, request: dict):
    if turn < 0:
        return completion("nothing to summarize")
    if turn == 1:
        return completion("a wrong one first", [("write_kernel", {"source": mla_wrong()}), ("profile_kernel", {})],
                          turn=turn)
    if turn == 2 and delivery == 1:
        return error(429, "slow down", retry_after=0.5)  # a retry the report must list
    if turn == 2:
        return completion("now a right one", [("write_kernel", {"source": BEST}), ("profile_kernel", {})], turn=turn)
    return completion("done", turn=turn)


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "marathon.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    """A finished scripted run in STATE/runs/<id>/temporal.db with its artifacts in STATE/artifacts;
    yields (state, facts, report folder). The server is stopped before the tests read the folder."""
    state = tmp_path_factory.mktemp("state")
    db = local.run_db(state, RUN_ID)
    tq, gq = queues()

    async def go():
        with FakeOpenAI(script) as fake, DevServer(db=db, log=db.parent / "temporal.log") as srv:
            spec = RunSpec(problem="mla_decode", model=ModelSettings(model="fake", base_url=fake.base_url, api_key_env="",
                                                                     retry_initial_s=0.3),
                           budgets=Budgets(max_tool_calls=5), eval=EvalSettings(device="cpu"), gpu_task_queue=gq)
            async with workers(srv.address, tq, gq, state / "artifacts") as client:
                handle = await start(client, spec, tq, workflow_id=RUN_ID)
                report = await handle.result()
                html = await write_for(client, RUN_ID, state)
                facts = await collect(client, RUN_ID, ArtifactStore(state / "artifacts"))
        return report, facts, html.parent

    report, facts, folder = asyncio.run(go())
    assert report.tool_calls == 5 and report.best is not None, report.stop_reason
    return state, report, facts, folder


def test_report_of_a_scripted_run(scripted):
    state, report, facts, folder = scripted
    assert folder == local.report_dir(state, RUN_ID)
    for name in ("report.html", "report.md", "attempts.csv", "notebook.md", "best_verdict.json", "best_kernel.py"):
        assert (folder / name).is_file() and (folder / name).stat().st_size > 0, name

    # every number traces back to the run's verdicts: the attempts, their statuses and the best
    rows = list(csv.DictReader((folder / "attempts.csv").open()))
    assert [int(r["attempt"]) for r in rows] == [a.n for a in report.ledger] == [0, 1, 2]
    assert [r["status"] for r in rows] == ["ok", "incorrect", "ok"]
    for row, a in zip(rows, report.ledger):
        e = a.best_eval() or a.evals[-1]
        assert row["status"] == a.status and int(row["tool_call"]) == a.tool_call
        assert (float(row["speedup"]) if row["speedup"] else None) == e.speedup
    best_verdict = json.loads((folder / "best_verdict.json").read_text())
    assert best_verdict == json.loads(report.best.verdict.model_dump_json())
    assert report.best.attempt == facts.best.attempt
    html = markup.unescape((folder / "report.html").read_text())
    md = (folder / "report.md").read_text()
    for text in (html, md):  # a CPU run: the best by its interpreter time, no speed claimed
        assert f"best: attempt {report.best.attempt} (" in text and "in the CPU's interpreter" in text
        assert "CPU run: its times mean nothing." in text
        assert "agent_turn: attempt 2" in text  # the 429'd model call, retried
    assert 'id="progress"' in html and "data:image/png;base64," in html and "http" not in html.split("<body>")[0]
    assert html.count('<tr class="attempt') == 3  # the attempts table
    notebook = (folder / "notebook.md").read_text()
    assert "profile attempt 1: incorrect" in notebook and "finished:" in notebook

    # the plotted points are the evaluations, in tool-call order, with their hours
    assert [(e.attempt, e.status) for e in facts.evaluations] == [(0, "ok"), (1, "incorrect"), (2, "ok")]
    assert all(e.hours is not None and 0 <= e.hours <= facts.hours + 0.01 for e in facts.evaluations)
    assert facts.start_source == STARTER_MLA and facts.best_source == (BEST if report.best.attempt == 2 else STARTER_MLA)

    # the best kernel, header and all, is judged ok again by the command its header names
    kernel = (folder / "best_kernel.py").read_text()
    assert kernel.endswith(facts.best_source) and f"workflow {RUN_ID}" in kernel
    command = next(line for line in kernel.splitlines() if line.startswith("#   marathon eval"))[4:].split()
    again = subprocess.run([sys.executable, str(ROOT / "marathon.py"), *command[1:], "--json"], cwd=folder,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["status"] == "ok"


def test_report_from_a_state_dir_brought_back(scripted, tmp_path):
    """A state directory carried from another host: `report` and `runs` start what they need, embedded."""
    state, report, _, _ = scripted
    carried = tmp_path / "carried"
    shutil.copytree(state, carried)
    out = tmp_path / "morning"
    made = cli("report", RUN_ID, "--state-dir", str(carried), "--out", str(out))
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == str(out / "report.html")
    assert (out / "best_kernel.py").read_text() == (state / "reports" / RUN_ID / "best_kernel.py").read_text()
    listed = cli("runs", "--state-dir", str(carried), "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["workflow_id"] == RUN_ID and row["problem"] == "mla_decode" and row["policy"] == "llm"
    assert row["status"] == "COMPLETED" and row["tool_calls"] == 5
    assert row["best_speedup"] == pytest.approx(report.best.speedup)
    assert row["report"] == str((out / "report.html").resolve())
    # a run kept in another run's database (an embedded suite's runs share the suite's) is found there;
    # the report again into the same folder replaces it
    (carried / "runs" / RUN_ID).rename(carried / "runs" / "suite-of-them")
    again = cli("report", RUN_ID, "--state-dir", str(carried), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "best_kernel.py").read_text() == (state / "reports" / RUN_ID / "best_kernel.py").read_text()


def test_bad_input(scripted, tmp_path):
    state, _, _, folder = scripted
    before = {p: p.read_bytes() for p in folder.iterdir()}
    unknown = cli("report", "no-such-run", "--state-dir", str(state))
    assert unknown.returncode == 2 and "no run or suite 'no-such-run'" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    gone = cli("report", RUN_ID, "--address", "127.0.0.1:1")
    assert gone.returncode == 2 and "cannot reach the Temporal server at 127.0.0.1:1" in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1
    other = tmp_path / "holiday-photos"
    other.mkdir()
    (other / "beach.jpg").write_bytes(b"\xff\xd8 not ours")
    refused = cli("report", RUN_ID, "--state-dir", str(state), "--out", str(other))
    assert refused.returncode == 2 and "holds something other than a report" in refused.stderr
    assert [p.name for p in other.iterdir()] == ["beach.jpg"] and (other / "beach.jpg").read_bytes() == b"\xff\xd8 not ours"
    assert cli("runs", "--since", "yesterday", "--state-dir", str(state)).returncode == 2
    assert {p: p.read_bytes() for p in folder.iterdir()} == before  # nothing overwritten


@pytest.mark.skipif(browser() is None, reason="no chromium installed")
def test_report_in_headless_chromium(scripted, tmp_path):
    """The page renders with its plots: the progress curve's blue is on the screenshot."""
    from PIL import Image

    _, _, _, folder = scripted
    png = screenshot(folder / "report.html", tmp_path / "report.png", width=1200, height=1400)
    img = Image.open(png).convert("RGB")
    colours = img.getcolors(maxcolors=1 << 20)
    assert len(colours) > 50, "a blank page"
    curve = sum(n for n, (r, g, b) in colours if abs(r - 0x0D) < 20 and abs(g - 0x47) < 20 and abs(b - 0xA1) < 20)
    assert curve > 500, f"the progress curve is not on the page ({curve} pixels)"


def _text(dom: str) -> str:
    """What the reader sees of a DOM: its text, tags dropped, entities read."""
    return markup.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom)))


@pytest.mark.skipif(browser() is None, reason="no chromium installed")
def test_the_pages_labels_in_headless_chromium(scripted, tmp_path):
    """The CPU run's page and a GPU verdict's, as Chromium loaded them: each figure says what it is."""
    _, report, facts, folder = scripted
    cpu_dom = dump_dom(folder / "report.html")
    cpu = _text(cpu_dom)
    assert 'id="cpu-banner"' in cpu_dom and "CPU run: its times mean nothing." in cpu
    assert cpu.index("CPU run: its times mean nothing.") < cpu.index(f"best: attempt {report.best.attempt}")
    assert "Every time here is the Triton interpreter's on a CPU: it says nothing about speed on a GPU" in cpu
    assert "in the CPU's interpreter, geometric mean over" in cpu  # the headline: what the best's figure is
    assert "speedup (worst shape, strongest baseline)" in cpu and "latency (geometric mean over shapes)" in cpu
    assert "<details>" in cpu_dom and "hover for each shape's" in cpu  # reasons in full, shapes on hover
    assert ", CPU: 3" in cpu  # the worker by host and device
    latencies = re.findall(r'<td class="num"[^>]*title="[^"]*">([^<]*)</td>', cpu_dom)  # the attempts' latencies
    timed = [x for x in latencies if x]  # (the wrong kernel's attempt is untimed)
    assert len(timed) == 2 and all(re.fullmatch(r"\d+(\.\d+)? (ns|µs|ms|s)", x) for x in timed), latencies
    assert "roofline" not in cpu and "floor" not in cpu  # empty on a CPU: not shown

    gpu = _text(dump_dom(gpu_report(tmp_path / "gpu")))
    v = gpu_verdict()
    assert "CPU run" not in gpu
    assert f"at {v.best_speedup():.3g}x against torch_compile (its worst shape, against the strongest baseline)" in gpu
    assert "latency floor roofline baselines speedup" in gpu  # the best's table, with its GPU-only columns
    assert "and the roofline floor, per shape" in gpu and "h200, GPU 0 (NVIDIA H200): 1" in gpu
    r = v.shapes[0]
    assert f"{r.latency_us / 1000:.3g} ms" in gpu or f"{r.latency_us:.3g} µs" in gpu


# ------------------------------------------------------------------ three runs of two problems
@pytest.fixture(scope="module")
def three_runs(temporal_server, client, tmp_path_factory):
    """On the session's server: an MLA run whose every attempt failed (finished), an MLA run paused after its
    start (still going), and a run of a KernelBench-format file problem (finished). Other tests' runs share
    the server: what is listed is checked for these three."""
    store = tmp_path_factory.mktemp("artifacts")
    tq, gq = queues()
    name, source = resolve_problem(str(ROOT / "docs" / "examples" / "silu_scale.py"))
    kernel = (ROOT / "docs" / "examples" / "silu_scale_kernel.py").read_text()

    async def go():
        async with workers(client, tq, gq, store):
            failed = await start(client, RunSpec(problem="mla_decode", source=REJECTED, policy="tuner",
                                                 budgets=Budgets(max_tool_calls=1), eval=EvalSettings(device="cpu"),
                                                 gpu_task_queue=gq), tq, workflow_id="mla-all-failed")
            silu = await start(client, RunSpec(problem=name, problem_source=source, source=kernel, policy="tuner",
                                               budgets=Budgets(max_tool_calls=1), eval=EvalSettings(device="cpu"),
                                               gpu_task_queue=gq), tq, workflow_id="silu-one-call")
            going = await start(client, RunSpec(problem="mla_decode", source=REJECTED, policy="tuner",
                                                budgets=Budgets(max_tool_calls=50), eval=EvalSettings(device="cpu"),
                                                gpu_task_queue=gq), tq, workflow_id="mla-still-going")
            await going.execute_update("pause")
            await failed.result()
            await silu.result()
            for _ in range(120):  # until its start is evaluated and it sits paused
                st = await going.query("status", result_type=RunStatus)
                if st.phase == "paused":
                    break
                await asyncio.sleep(0.5)
            state = tmp_path_factory.mktemp("state3")
            going_html = await write_for(client, "mla-still-going", state)
            failed_html = await write_for(client, "mla-all-failed", state)
            rows = await list_runs(state, temporal_server.address)
            only_silu = await list_runs(state, temporal_server.address, problem=name)
            try:
                await collect(client, "never-started")
                unknown = None
            except ReportError as exc:
                unknown = str(exc)
            await going.execute_update("stop", "the test is done")  # a stop ends a paused run: no resume
            await going.result()
        return state, going_html, failed_html, rows, only_silu, unknown, name

    return asyncio.run(go())


def test_report_of_a_run_still_going(three_runs):
    _, going_html, _, _, _, _, _ = three_runs
    html = going_html.read_text()
    assert "still going (paused" in html and "RUNNING" in html
    assert "Every attempt failed" in html  # its only evaluation so far was rejected


def test_report_of_a_run_whose_every_attempt_failed(three_runs):
    _, _, failed_html, _, _, _, _ = three_runs
    folder = failed_html.parent
    html = failed_html.read_text()
    assert "no kernel passed: its one evaluation failed (1 rejected)" in html
    assert 'id="no-progress"' in html and "<img" not in html  # said plainly, no empty plot
    assert not (folder / "best_kernel.py").exists() and not (folder / "best_verdict.json").exists()
    assert "rejected" in (folder / "attempts.csv").read_text()
    assert "Every attempt failed" in (folder / "report.md").read_text()


def test_runs_lists_three_runs_of_two_problems(three_runs):
    state, going_html, failed_html, rows, only_silu, unknown, name = three_runs
    mine = {r.workflow_id: r for r in rows if r.workflow_id in ("mla-all-failed", "silu-one-call", "mla-still-going")}
    assert set(mine) == {"mla-all-failed", "silu-one-call", "mla-still-going"}
    assert mine["mla-all-failed"].problem == mine["mla-still-going"].problem == "mla_decode"
    assert mine["silu-one-call"].problem == name
    assert mine["mla-still-going"].status == "RUNNING" and mine["mla-all-failed"].status == "COMPLETED"
    assert mine["mla-all-failed"].best_speedup is None and mine["mla-all-failed"].tool_calls == 1
    assert mine["silu-one-call"].best_speedup is not None and mine["silu-one-call"].tool_calls == 1
    assert all(r.policy == "tuner" and r.hours >= 0 for r in mine.values())
    assert mine["mla-all-failed"].report == str(failed_html.resolve())
    assert mine["mla-still-going"].report == str(going_html.resolve()) and mine["silu-one-call"].report is None
    assert "silu-one-call" in [r.workflow_id for r in only_silu] and all(r.problem == name for r in only_silu)
    assert not {"mla-all-failed", "mla-still-going"} & {r.workflow_id for r in only_silu}
    assert unknown == "no run 'never-started'"


def gpu_verdict():
    from kernels.evaluator.verdict import Verdict
    record = json.loads((ROOT / "bench" / "results" / "h200" / "mla_decode_starter_tuner.json").read_text())
    return Verdict.model_validate(record["verdict"])


def gpu_report(out):
    """The report folder of a one-attempt run judged by an H200 verdict the repository keeps (bench/results),
    written without a server; returns report.html."""
    from datetime import datetime, timezone

    from reports.collect import AttemptRow, EvalPoint, RunFacts, ShapeFigure
    from reports.render import write_report
    from workflows.models import BestReport

    v = gpu_verdict()
    speedup = v.best_speedup()
    now = datetime.now(timezone.utc)
    ncu = {"_mla_decode_kernel": {"dram__throughput.avg.pct_of_peak_sustained_elapsed": 41.5}}
    facts = RunFacts(workflow_id="gpu-run", run_ids=["r1"], problem="mla_decode", policy="tuner",
                     temporal_status="COMPLETED", finished=True, phase="finished", started_at=now, ended_at=now,
                     generated_at=now, hours=0.1, tool_calls=3, device="cuda", timed=True,
                     shapes=[r.shape for r in v.shapes], baselines=sorted(v.shapes[0].baselines),
                     attempts=[AttemptRow(n=0, origin="start", tool_call=0, status="ok", speedup=speedup, reason=v.reason,
                                          baseline="torch_compile", evaluations=1, hours=0.05,
                                          latency_us=v.shapes[0].latency_us,
                                          shapes=[ShapeFigure.of(r) for r in v.shapes])],
                     evaluations=[EvalPoint(attempt=0, tool="profile_kernel", mode="full", status="ok", reason=v.reason,
                                            tool_call=1, hours=0.05, speedup=speedup)],
                     best=BestReport(attempt=0, source=STARTER_MLA, sha256="0" * 64, speedup=speedup, verdict=v),
                     best_source=STARTER_MLA, start_source=STARTER_MLA, best_ncu=ncu,
                     evaluations_by_worker={"h200, GPU 0 (NVIDIA H200)": 1})
    return write_report(facts, out)


def test_report_of_a_gpu_verdict(tmp_path):
    """The parts only a GPU run fills: the GPU and driver in best_kernel.py's header, a judge-again command
    on CUDA, the roofline floor per shape, Nsight Compute figures."""
    from reports.fmt import duration_us

    v = gpu_verdict()
    assert v.gpu is not None and any(r.floor_us for r in v.shapes)
    html_path = gpu_report(tmp_path / "gpu")
    header = (tmp_path / "gpu" / "best_kernel.py").read_text().split('"""', 1)[0]
    assert f"GPU: {v.gpu.name}, driver {v.gpu.driver}" in header and "--device cuda" in header
    assert f"torch {v.versions['torch']}, triton {v.versions['triton']}" in header
    html = markup.unescape(html_path.read_text())
    assert 'id="shapes"' in html and "dram__throughput.avg.pct_of_peak_sustained_elapsed" in html
    for r in v.shapes:
        assert f'data-us="{r.floor_us}">{duration_us(r.floor_us)}' in html
        assert f'data-us="{r.latency_us}">{duration_us(r.latency_us)}' in html
    assert 'id="cpu-banner"' not in html
    assert "The best kernel is the starting kernel, unchanged." in html


def test_the_closing_sweep_check_is_not_an_attempts_own_evaluation():
    from reports.collect import _sweep_check
    bench_run = RunSpec(problem="mla_decode")
    sweep_run = RunSpec(problem="mla_decode", eval=EvalSettings(shapes="sweep"))
    check = {"attempt": 3, "settings": {"shapes": "sweep", "baselines": False}}
    assert _sweep_check(check, bench_run)
    assert not _sweep_check(check, sweep_run)  # a run judged on the sweep throughout has no closing check
    assert not _sweep_check({"attempt": 3, "settings": {"shapes": "bench"}}, bench_run)
