"""How figures read, without a server or a browser: units and significant figures (reports.fmt), the report
page's labels for a CPU run and a GPU verdict, the CLI's tables and lines, the compaction line, and every
flag's help. The same pages are opened in Chromium by tests/reports/test_report.py."""
from __future__ import annotations

import argparse
import html as markup
import json
import re
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from marathon_support import ROOT, STARTER_MLA
from reports import fmt

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
SCIENTIFIC = re.compile(r"\d[eE][+-]?\d")


@pytest.mark.parametrize("x, text", [
    (0.000912, "0.000912x"), (0.0027, "0.0027x"), (0.00271828, "0.00272x"), (1.2345, "1.23x"), (12.345, "12.3x"),
    (123.45, "123x"), (1234.5, "1234x"), (0.999, "0.999x"), (2.5, "2.5x"), (0.0, "0x"), (None, "")])
def test_speedups_have_three_significant_figures(x, text):
    assert fmt.speedup(x) == text


@pytest.mark.parametrize("us, text", [
    (0.812, "812 ns"), (1.0, "1 µs"), (184.3, "184 µs"), (999.4, "999 µs"), (999.6, "1 ms"), (23979.0, "24 ms"),
    (202900.0, "203 ms"), (1.34e6, "1.34 s"), (45440.8, "45.4 ms"), (None, "")])
def test_times_in_plain_units(us, text):
    assert fmt.duration_us(us) == text


def test_no_scientific_notation_at_any_scale():
    for k in range(-9, 12):
        for m in (1.0, 2.345, 9.999):
            assert not SCIENTIFIC.search(fmt.speedup(m * 10.0 ** k)), m * 10.0 ** k
            assert not SCIENTIFIC.search(fmt.duration_us(m * 10.0 ** k)), m * 10.0 ** k


@pytest.mark.parametrize("identity, device, gpu, name", [
    ("4845@vm", "cpu", "", "vm, CPU"),
    ("12@h200-box/gpu3", "cuda", "NVIDIA H200", "h200-box, GPU 3 (NVIDIA H200)"),
    ("12@box", "cuda:1", "NVIDIA H100", "box, GPU 1 (NVIDIA H100)"),
    ("12@box", "cuda", "", "box, GPU"),
])
def test_workers_are_named_by_host_and_device(identity, device, gpu, name):
    assert fmt.worker_name(identity, device, gpu) == name


# ------------------------------------------------------------------ the report's pages
def gpu_verdict():
    from kernels.evaluator.verdict import Verdict
    record = json.loads((ROOT / "bench" / "results" / "h200" / "mla_decode_starter_tuner.json").read_text())
    return Verdict.model_validate(record["verdict"])


def cpu_verdict(latencies=(53366.76, 38692.04), torch=(217.3, 105.9)):
    from kernels.evaluator.verdict import ShapeResult, Verdict
    shapes = [ShapeResult(shape=s, correct=True, rel_err=2.1e-4, latency_us=lat, baselines={"torch": b},
                          speedup={"torch": round(b / lat, 4)})
              for s, lat, b in zip(({"B": 1, "H": 4, "S": 100}, {"B": 2, "H": 3, "S": 37}), latencies, torch)]
    return Verdict(status="ok", reason="correct on every shape; " + "; ".join(
        f"{x.shape}: {x.latency_us} us" for x in shapes) + " [CPU interpreter: times not meaningful] " + "x" * 200,
                   problem="mla_decode", kernel="candidate", device="cpu", timing_meaningful=False, shapes=shapes,
                   versions={"torch": "2", "triton": "3"})


def facts_of(verdicts: dict[int, object], best: int, device: str, worker: str):
    """RunFacts of a tuner run whose attempt n was judged `verdicts[n]`, its best `best`."""
    import math

    from reports.collect import AttemptRow, EvalPoint, RunFacts, ShapeFigure
    from workflows.models import BestReport

    rows, points = [], []
    for n, v in verdicts.items():
        lat = math.exp(sum(math.log(r.latency_us) for r in v.shapes) / len(v.shapes))
        sp = v.best_speedup()
        baseline = min((x, k) for r in v.shapes for k, x in r.speedup.items())[1]
        rows.append(AttemptRow(n=n, origin="start" if n == 0 else "tuner", tool_call=2 * n + 1, status="ok",
                               reason=v.reason, speedup=sp, baseline=baseline, latency_us=lat, evaluations=1,
                               hours=0.01 * (n + 1), config={"BLOCK_S": 16 * (n + 1)},
                               shapes=[ShapeFigure.of(r) for r in v.shapes]))
        points.append(EvalPoint(attempt=n, tool="profile_kernel", mode="full", status="ok", reason=v.reason,
                                tool_call=2 * n + 1, hours=0.01 * (n + 1), speedup=sp, latency_us=lat))
    v = verdicts[best]
    return RunFacts(workflow_id=f"{device}-run", run_ids=["r1"], problem="mla_decode", policy="tuner",
                    temporal_status="COMPLETED", finished=True, phase="finished", stop_reason="search space exhausted",
                    started_at=NOW, ended_at=NOW, generated_at=NOW, hours=0.05, tool_calls=2 * len(verdicts),
                    device=device, shapes=[r.shape for r in v.shapes], baselines=sorted(v.shapes[0].baselines),
                    attempts=rows, evaluations=points,
                    best=BestReport(attempt=best, source=STARTER_MLA, sha256="0" * 64, speedup=v.best_speedup(),
                                    verdict=v),
                    best_source=STARTER_MLA, start_source=STARTER_MLA, evaluations_by_worker={worker: len(verdicts)},
                    timed=v.timing_meaningful,
                    compactions=[])


def cpu_facts(best: int = 1):
    # attempt 1 is the fastest in the interpreter; attempt 2's torch baseline read slower, so its "speedup" is higher
    return facts_of({0: cpu_verdict((133652.0, 124290.0)), 1: cpu_verdict((41523.7, 38952.2)),
                     2: cpu_verdict((45440.8, 38692.0), torch=(217.3, 2390.0))}, best, "cpu", "vm, CPU")


def gpu_facts():
    return facts_of({0: gpu_verdict()}, 0, "cuda", "h200-box, GPU 0 (NVIDIA H200)")


def test_the_gpu_page_says_what_each_figure_is():
    from reports.render import outcome, render_html, render_md
    facts = gpu_facts()
    v = facts.best_verdict
    html, md = markup.unescape(render_html(facts)), render_md(facts)
    line = outcome(facts)
    assert f"best: attempt 0 at {fmt.speedup(v.best_speedup())} against torch_compile" in line
    assert "its worst shape, against the strongest baseline" in line
    for text in (html, md):
        assert line in text
        assert "h200-box, GPU 0 (NVIDIA H200): 1" in text  # the worker, by host and GPU
    assert 'id="cpu-banner"' not in html
    assert "<th>floor</th>" in html and "<th>roofline</th>" in html and "and the roofline floor, per shape" in html
    assert fmt.duration_us(v.shapes[0].latency_us) in html and fmt.duration_us(v.shapes[0].floor_us) in html
    assert "latency (geometric mean over shapes)" in html and "speedup (worst shape, strongest baseline)" in html
    assert not SCIENTIFIC.search(figures(html))


def figures(html: str) -> str:
    """The page's visible text above the notebook, less the relative errors (read as 2.1e-04 by design)."""
    body = html.split("<body>", 1)[1].split("<h2>Lab notebook</h2>")[0]
    body = re.sub(r'<td class="num">[0-9.]+e[+-]\d+</td>', "", body)
    return re.sub(r"<[^>]+>", " ", body)


def test_the_cpu_page_warns_and_hides_what_a_cpu_leaves_empty():
    from reports.plots import shape_series
    from reports.render import outcome, render_html, render_md
    facts = cpu_facts(best=1)
    html = markup.unescape(render_html(facts))
    assert 'id="cpu-banner"' in html and "CPU run: its times mean nothing." in html
    assert html.index('id="cpu-banner"') < html.index('class="outcome')  # at the top of the page
    line = outcome(facts)
    assert line.endswith("best: attempt 1 (40.2 ms in the CPU's interpreter, geometric mean over 2 shapes), "
                         "the correct kernel with the lowest interpreter time")
    assert "torch on B=2,H=3,S=37 read from 106 µs to 2.39 ms across this run's evaluations" in html
    assert "<th>floor</th>" not in html and "<th>roofline</th>" not in html and "roofline floor" not in html
    assert [label for label, _, _ in shape_series(facts)] == ["best kernel", "torch"]
    assert "vm, CPU: 3" in html
    # full reasons, expandable, with each shape's figures; each shape's latency on hover too
    row = cpu_facts().attempts[1]
    assert html.count("<details>") == 3 and row.reason in html
    assert 'title="B=1,H=4,S=100: 41.5 ms, torch 217 µs; B=2,H=3,S=37: 39 ms, torch 106 µs"' in html
    md = render_md(facts)
    assert md.startswith("# cpu-run\n\n> **CPU run: its times mean nothing.**") and f"\n\n{line}\n" in md
    assert not SCIENTIFIC.search(figures(html))


def test_the_candidates_text_is_escaped_on_the_page():
    """A reason and a kernel source are the candidate's: markup in them is shown, never run."""
    from reports.render import render_html
    facts = cpu_facts()
    facts.attempts[0].reason = "compile error near <script>alert(1)</script> " + "y" * 150
    facts.best_source = STARTER_MLA + "\n# </pre><img src=x onerror=alert(2)>\n"
    html = render_html(facts)
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(2)&gt;" in html


def test_a_cpu_best_crowned_by_its_speedup_says_so():
    """A run made before the CPU ranked by interpreter time: the page names the faster attempt."""
    from reports.render import outcome
    line = outcome(cpu_facts(best=2))
    assert "best: attempt 2 (41.9 ms in the CPU's interpreter" in line
    assert "chosen by its speedup, noise on a CPU (attempt 1 had the lowest interpreter time, 40.2 ms)" in line


# ------------------------------------------------------------------ the CLI
def run_report(verdicts: dict, best: int):
    import math

    from workflows.models import Attempt, BestReport, EvalDigest, RunReport, TokenUsage
    ledger = []
    for n, v in verdicts.items():
        lat = [r.latency_us for r in v.shapes]
        g = math.exp(sum(map(math.log, lat)) / len(lat))
        ledger.append(Attempt(n=n, origin="start" if n == 0 else "tuner", sha256="0" * 64, lines=10,
                              config={"BLOCK_S": 16 * (n + 1)},
                              evals=[EvalDigest(tool="profile_kernel", mode="full", status="ok", reason=v.reason,
                                                speedup=v.best_speedup(), baseline="torch", latency_us=g,
                                                tool_call=2 * n + 1)]))
    return RunReport(workflow_id="w", problem="mla_decode", policy="tuner", stop_reason="search space exhausted",
                     tool_calls=6, turns=3, attempts=len(ledger), continue_as_new=0, compactions=1, hours=0.03,
                     tokens=TokenUsage(), best=BestReport(attempt=best, source="x", sha256="a" * 64, speedup=verdicts[best].best_speedup(),
                                     verdict=verdicts[best]), ledger=ledger)


def test_the_run_table_on_a_cpu():
    from cli.tables import CPU_LINE, run_report_table
    verdicts = {0: cpu_verdict((133652.0, 124290.0)), 1: cpu_verdict((41523.7, 38952.2))}
    text = run_report_table(run_report(verdicts, 1))
    assert text.count(CPU_LINE) == 1 and "every time here is the Triton interpreter's on a CPU" in text
    assert "best: attempt 1, 40.2 ms in the CPU's interpreter, the correct kernel with the lowest interpreter time" in text
    assert " *    1 tuner" in text and "40.2 ms" in text and "129 ms" in text
    assert "headline:" not in text  # no speedup claim on a CPU
    assert not SCIENTIFIC.search(text.replace("2.10e-04", ""))
    crowned = run_report_table(run_report(verdicts, 0))
    assert "chosen by its speedup, noise on a CPU (attempt 1 had the lowest interpreter time, 40.2 ms)" in crowned


def test_the_run_table_of_a_task_names_its_ratio_not_latencies():
    from cli.tables import run_report_table
    from workflows.models import Attempt, EvalDigest, RunReport, TokenUsage
    from workflows.records import TASK_BASELINE
    ledger = [Attempt(n=n, origin="start" if n == 0 else "tuner", sha256="0" * 64, config={"membership": kind},
                      evals=[EvalDigest(tool="measure", mode="full", status="ok", reason="ok", speedup=gain,
                                        baseline=TASK_BASELINE, speedups={TASK_BASELINE: gain})])
              for n, (kind, gain) in enumerate((("list", 1.0), ("set", 4.8)))]
    rep = RunReport(workflow_id="w", problem="slow_suite", policy="tuner", stop_reason="search space exhausted",
                    tool_calls=3, turns=2, attempts=2, continue_as_new=0, compactions=0, hours=0.01,
                    tokens=TokenUsage(), best=None, ledger=ledger)
    text = run_report_table(rep)
    assert "times better than the task's own files on its metric" in text
    assert "latency" not in text and "shapes" not in text
    assert "4.8x vs the task's own files" in text
    kernel = run_report_table(run_report({0: cpu_verdict()}, 0))
    assert "latency is the geometric mean over the shapes" in kernel


def test_the_verdict_table_on_a_gpu():
    from cli.tables import CPU_LINE, verdict_table
    v = gpu_verdict()
    text = verdict_table(v)
    assert CPU_LINE not in text
    assert f"headline: {fmt.speedup(v.best_speedup())}, the worst shape against the strongest baseline" in text
    assert "851 µs" in text and "torch_compile 0.0256x (21.8 µs)" in text
    head = next(line for line in text.splitlines() if line.lstrip().startswith("shape"))
    assert head.split()[:7] == ["shape", "ok", "rel_err", "latency", "graph", "wall", "roofline"]
    cpu = verdict_table(cpu_verdict())
    head = next(line for line in cpu.splitlines() if line.lstrip().startswith("shape"))
    assert head.split()[:4] == ["shape", "ok", "rel_err", "latency"] and "roofline" not in cpu  # empty on a CPU
    assert cpu.index(CPU_LINE) < cpu.index(head)


def status(**kw):
    base = dict(tool_calls=5, tool_calls_budget=1000, hours_used=0.01, hours_budget=24.0, step="tool call 5",
                best_attempt=0, best_speedup=0.000912)
    return SimpleNamespace(**{**base, **kw})


def test_the_progress_line():
    from cli.tables import progress_line
    assert progress_line(status(), gpu_verdict()).startswith("[5/1000 tool calls, 0.01/24 h, best: 0.000912x (attempt 0)]")
    assert "best: none yet" in progress_line(status(best_attempt=None, best_speedup=None), None)
    assert "best: attempt 0, 45.4 ms in the CPU's interpreter]" in progress_line(status(), cpu_verdict())


def test_a_suite_table_with_long_names_keeps_its_columns():
    from cli.tables import suite_report_table
    from workflows.suite import SuiteEntry, SuiteReport
    long = "level3_fused_attention_with_a_rather_long_problem_name"
    report = SuiteReport(workflow_id="suite-1", problems=[
        SuiteEntry(problem=long, workflow_id="suite-1/0-a", status="ok", reason="correct", best_attempt=12,
                   speedups={"eager": 1.23456, "torch_compile": 0.9}, speedup_vs_eager=1.23456),
        SuiteEntry(problem="relu", workflow_id="suite-1/1-relu", status="no kernel", reason="budget spent")],
        fast_p={"fast_0": 0.5, "fast_1": 0.5}, geomean_speedup_vs_eager=1.23456)
    text = suite_report_table(report, {"suite-1/0-a": "search space exhausted"})
    head, first, second = text.splitlines()[1:4]
    assert head.index("status") == first.index("ok") == second.index("no kernel")
    assert head.index("stopped because") == first.index("search space exhausted") == second.index("budget spent")
    assert "1.23x vs eager, 0.9x vs torch_compile" in first and "geometric-mean speedup vs eager 1.23x" in text
    from cli.tables import CPU_LINE
    assert CPU_LINE not in text  # timed on a GPU: no banner
    report.problems[0].timing_meaningful = False
    assert suite_report_table(report).splitlines()[1].strip() == CPU_LINE  # an interpreter's times: said first


def test_the_runs_table_says_who_started_each_run():
    from reports.runs import RunRow, table
    rows = [RunRow(workflow_id="mla_decode-tuner-" + "a" * 30, problem="mla_decode", policy="tuner",
                   status="COMPLETED", started_at=NOW, hours=0.03, tool_calls=23, best_speedup=0.0027,
                   started_by="alice@box"),
            RunRow(workflow_id="kda-1", problem="kda", policy="llm", status="RUNNING", started_at=NOW, hours=1.5)]
    head, first, second = table(rows).splitlines()
    who, report = head.index("started by"), head.index("report")
    assert first.index("alice@box") == who and second[who] == "-"  # a run started otherwise: nobody named
    assert first[report] == second[report] == "-"
    assert first[head.index("status"):].startswith("completed") and second[head.index("status"):].startswith("running")
    assert "0.0027x" in first


def test_the_compaction_line_says_what_was_kept():
    from activities.compaction import CompactResult
    from compaction.memory import BestKernel, Goal, Memory, Strategy
    mem = Memory(goal=Goal(problem="mla_decode"), best=BestKernel(attempt=3), compactions=1, covers_through_turn=12,
                 strategies=[Strategy(hypothesis=f"BLOCK_S={b}") for b in (8, 16, 32)])
    line = CompactResult(memory=mem, used_model=False, fallback_reason="no model configured", tokens_before=39,
                         tokens_after=1027).line()
    assert line == ("compaction 1 through turn 12 (deterministic: no model configured): kept the best (attempt 3), "
                    "3 strategies and 0 failures in a memory of 1,027 tokens (the prompt before it: 39 tokens)")


# ------------------------------------------------------------------ --help
def test_every_flag_of_every_command_has_help_with_its_default():
    import marathon
    from cli.help import DefaultsFormatter, walk
    parser = marathon.build_parser()
    missing = []
    for command, action, required in walk(parser):
        text = DefaultsFormatter("marathon")._get_help_string(action) if action.help else ""
        switch = isinstance(action, (argparse._StoreTrueAction, argparse._AppendAction))
        if not text or (action.option_strings and not required and not switch and "default" not in text.lower()):
            missing.append(f"{command} {action.option_strings or action.dest}")
    assert not missing, missing
    top = parser.format_help()
    listed = [line.split()[0] for line in top.split("commands:", 1)[1].splitlines()[2:] if line.startswith("    ")]
    assert listed == ["eval", "problem", "run", "suite", "follow", "dev", "report", "runs", "schedule"]
    assert all(len(line) <= 80 for line in top.splitlines())  # one line each
