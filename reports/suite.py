"""A suite's report (`marathon report SUITE_ID`, and at the end of `marathon suite`): fast_p at each
threshold and the geometric-mean speedup over eager, then one row per problem: its status, its best
kernel's speedups, why its run stopped, and a link to its run's own report (written beside it, each
as `marathon report RUN_ID` writes it). A finished suite's figures come from its result; a running
one's from its `finished` query, the problems still going listed as running."""
from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, Field
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from reports import fmt
from reports.collect import ReportError, _payload
from reports.render import _env, write_report_folder
from workflows import names
from workflows.models import RunReport
from workflows.suite import FAST_P, SuiteEntry, SuiteReport, SuiteSpec, child_id, score


class SuiteRow(BaseModel):
    problem: str
    workflow_id: str
    status: str  # the best kernel's verdict status, "no kernel", "failed", or "running"
    reason: str = ""
    stop_reason: str = ""  # why its run stopped
    best_attempt: int | None = None
    speedups: dict[str, float] = Field(default_factory=dict)
    speedup_vs_eager: float | None = None
    report: str | None = None  # its run's report.html, relative to the suite's report folder
    timed: bool | None = None  # whether its best kernel's times mean anything (a GPU's); None: unknown


class SuiteFacts(BaseModel):
    workflow_id: str
    temporal_status: str
    finished: bool
    started_at: datetime
    ended_at: datetime | None = None
    generated_at: datetime
    parallel: int = 1
    rows: list[SuiteRow]
    fast_p: dict[str, float]
    geomean_speedup_vs_eager: float | None = None

    @property
    def cpu(self) -> bool:
        """Some problem's times are the CPU's interpreter's: the page says so at its top."""
        return any(r.timed is False for r in self.rows)


async def _result(client: Client, workflow_id: str):
    """The suite's spec (its input) and its result (None while it runs), from its history."""
    spec, result = None, None
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.HasField("workflow_execution_started_event_attributes"):
            raw = _payload(event.workflow_execution_started_event_attributes.input)
            try:
                spec = SuiteSpec.model_validate(raw)
            except ValueError:
                spec = None
        elif event.HasField("workflow_execution_completed_event_attributes"):
            raw = _payload(event.workflow_execution_completed_event_attributes.result)
            result = SuiteReport.model_validate(raw) if raw is not None else None
    return spec, result


async def collect_suite(client: Client, workflow_id: str, now: datetime | None = None) -> SuiteFacts:
    now = now or datetime.now(timezone.utc)
    desc = await client.get_workflow_handle(workflow_id).describe()
    if desc.workflow_type != names.SUITE_WORKFLOW_TYPE:
        raise ReportError(f"{workflow_id!r} is a {desc.workflow_type} workflow, not a suite")
    spec, result = await _result(client, workflow_id)
    finished = desc.status not in (None, WorkflowExecutionStatus.RUNNING)
    if result is not None:
        entries = list(result.problems)
    else:
        try:
            entries = list(await client.get_workflow_handle(workflow_id).query("finished", result_type=list[SuiteEntry]))
        except RPCError:
            entries = []  # no worker answers: the problems are listed from the input alone
    done = {e.workflow_id: e for e in entries}
    rows: list[SuiteRow] = []
    runs = spec.runs if spec is not None else []
    ids = [child_id(workflow_id, i, r.problem) for i, r in enumerate(runs)] or [e.workflow_id for e in entries]
    problems = [r.problem for r in runs] or [e.problem for e in entries]
    for wid, problem in zip(ids, problems):
        e = done.get(wid)
        if e is None:
            rows.append(SuiteRow(problem=problem, workflow_id=wid,
                                 status="running" if not finished else "not run"))
            continue
        run = await _run_report(client, wid)
        best = run.best if run is not None else None
        stop = e.stop_reason or (run.stop_reason if run is not None else "") or e.reason
        rows.append(SuiteRow(problem=e.problem, workflow_id=wid, status=e.status, reason=e.reason, stop_reason=stop,
                             best_attempt=e.best_attempt, speedups=dict(e.speedups),
                             speedup_vs_eager=e.speedup_vs_eager,
                             timed=best.verdict.timing_meaningful if best is not None else None))
    scored = result or score(workflow_id, entries)
    if result is None and len(entries) < len(rows):  # the share of the problems finished so far, of all of them
        scored = score(workflow_id, entries + [SuiteEntry(problem=r.problem, workflow_id=r.workflow_id, status=r.status)
                                               for r in rows if r.workflow_id not in done])
    return SuiteFacts(workflow_id=workflow_id, temporal_status=desc.status.name if desc.status else "UNKNOWN",
                      finished=finished, started_at=desc.start_time, ended_at=desc.close_time if finished else None,
                      generated_at=now, parallel=spec.parallel if spec is not None else 1, rows=rows,
                      fast_p=scored.fast_p, geomean_speedup_vs_eager=scored.geomean_speedup_vs_eager)


async def _run_report(client: Client, workflow_id: str) -> RunReport | None:
    """A problem's run's own result: why it stopped (for a suite result written before entries carried
    it) and whether its best kernel's times mean anything."""
    try:
        return await client.get_workflow_handle(workflow_id, result_type=RunReport).result()
    except Exception:  # a failed run, or one whose history is gone: the suite's entry says why
        return None


def render_suite_html(facts: SuiteFacts) -> str:
    return _env().get_template("suite.html.j2").render(f=facts, thresholds=[f"fast_{p:g}" for p in FAST_P],
                                                       colours={"ok": "#2e7d32"}, x=fmt.speedup,
                                                       cpu_times=fmt.CPU_TIMES)


def render_suite_md(facts: SuiteFacts) -> str:
    return _env().get_template("suite.md.j2").render(f=facts, thresholds=[f"fast_{p:g}" for p in FAST_P],
                                                     x=fmt.speedup, cpu_times=fmt.CPU_TIMES)


def write_suite_report(facts: SuiteFacts, out: Path) -> Path:
    """The suite's report folder: report.html, report.md, suite.json; returns report.html's path."""
    return write_report_folder(out, facts.workflow_id, {
        "report.html": render_suite_html(facts), "report.md": render_suite_md(facts),
        "suite.json": facts.model_dump_json(indent=2) + "\n"})


def link(html: Path, suite_out: Path) -> str:
    """A run's report.html as the suite's page links to it."""
    return os.path.relpath(html, suite_out)
