"""A run's facts, gathered once into one model (RunFacts) that every output of the report is drawn from.

Sources: the workflow's result (a finished run's RunReport: attempts, best, counts) or, while it runs,
its queries (status, attempts, best); the event histories of every segment of the run (continue-as-new
hops), which time each evaluation and hold the retries and faults; and the artifact store (kernel
sources kept there by key, the lab notebook). A finished run needs no worker: its result is in its
history."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, Field
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.artifacts import ArtifactStore
from activities.compaction import CompactResult
from compaction.text import one_line
from kernels.evaluator.verdict import ShapeResult, Verdict
from kernels.labels import config_label, shape_label
from reports.fmt import worker_name
from tasks.spec import TaskBundle
from workflows import names
from workflows.models import AgentLine, Attempt, BestReport, EvalResult, RunReport, RunSetup, RunSpec, RunStatus

QUERY_TIMEOUT_S = 20.0


class ReportError(Exception):
    """A report that cannot be made: an unknown run, a run nobody answers for. One line."""


class EvalPoint(BaseModel):
    """One evaluation of one attempt, placed in time and in the sequence of tool calls."""
    attempt: int
    tool: str
    mode: str
    status: str
    reason: str
    tool_call: int
    hours: float | None = None  # since the run started; None where the history no longer holds it
    speedup: float | None = None
    baseline: str | None = None
    latency_us: float | None = None
    roofline_pct: float | None = None


class ShapeFigure(BaseModel):
    """One shape of an evaluation: what the attempts table shows on hover and in its detail row."""
    shape: str
    correct: bool
    latency_us: float | None = None
    baselines: dict[str, float] = Field(default_factory=dict)  # name -> median us
    speedups: dict[str, float] = Field(default_factory=dict)

    @classmethod
    def of(cls, r: ShapeResult) -> "ShapeFigure":
        return cls(shape=shape_label(r.shape), correct=r.correct,
                   latency_us=r.latency_us, baselines=dict(r.baselines), speedups=dict(r.speedup))


class AttemptRow(BaseModel):
    n: int
    origin: str
    parent: int | None = None
    tool_call: int
    config: dict[str, Any] | None = None
    status: str  # its last evaluation's, or "unevaluated"
    reason: str = ""
    speedup: float | None = None  # its best ok profile's
    baseline: str | None = None
    latency_us: float | None = None  # geometric mean over the shapes
    roofline_pct: float | None = None
    evaluations: int = 0
    hours: float | None = None  # when its last evaluation ended
    shapes: list[ShapeFigure] = Field(default_factory=list)  # of the evaluation shown, where its history holds it

    @property
    def description(self) -> str:
        if self.config:
            return config_label(self.config)
        return self.origin + (f" of {self.parent}" if self.parent is not None else "")


class TimedEvent(BaseModel):
    hours: float
    what: str


class RunFacts(BaseModel):
    workflow_id: str
    run_ids: list[str]  # every segment, first to last
    problem: str
    problem_source: str | None = None  # a KernelBench-format problem file's source
    task: TaskBundle | None = None  # a task's run: the task as the run was given it
    policy: str
    temporal_status: str  # RUNNING, COMPLETED, FAILED, TERMINATED, ...
    finished: bool
    phase: str
    step: str = ""
    stop_reason: str = ""
    started_at: datetime
    ended_at: datetime | None = None
    generated_at: datetime
    hours: float
    tool_calls: int
    tool_calls_budget: int | None = None
    hours_budget: float | None = None
    device: str = ""
    shapes: list[dict[str, int]] = Field(default_factory=list)
    baselines: list[str] = Field(default_factory=list)
    attempts: list[AttemptRow] = Field(default_factory=list)
    evaluations: list[EvalPoint] = Field(default_factory=list)
    best: BestReport | None = None
    best_source: str | None = None
    best_ncu: dict[str, Any] | None = None
    best_sweep: str | None = None  # the closing sweep check of the best, in a line
    start_source: str | None = None
    start_label: str = ""
    compactions: list[TimedEvent] = Field(default_factory=list)
    compactions_count: int = 0
    hops: list[TimedEvent] = Field(default_factory=list)
    retries: list[TimedEvent] = Field(default_factory=list)
    faults: list[TimedEvent] = Field(default_factory=list)
    notebook: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    agents: list[AgentLine] = Field(default_factory=list)  # islands: one line per agent (a finished run's)
    # evaluations completed by each evaluation worker, named by host and device (reports.fmt.worker_name), the agents' too
    evaluations_by_worker: dict[str, int] = Field(default_factory=dict)
    timed: bool | None = None  # whether the run's times mean anything (a GPU's); None: nothing timed yet

    @property
    def cpu(self) -> bool:
        """Times from the CPU's Triton interpreter: the page says so at its top, and hides what a CPU leaves empty."""
        return self.timed is False

    def fastest_attempt(self) -> AttemptRow | None:
        """The ok attempt with the lowest latency (geometric mean over the shapes)."""
        ok = [a for a in self.attempts if a.status == "ok" and a.latency_us is not None]
        return min(ok, key=lambda a: (a.latency_us, a.n)) if ok else None

    @property
    def best_verdict(self) -> Verdict | None:
        return self.best.verdict if self.best else None

    def best_baseline_name(self) -> str:
        """The baseline the best speedup is against (the strongest one on its worst shape)."""
        if self.best is not None:
            for a in self.attempts:
                if a.n == self.best.attempt and a.baseline:
                    return a.baseline
        return "the strongest baseline"

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for e in self.evaluations:
            counts[e.status] = counts.get(e.status, 0) + 1
        return counts


# ------------------------------------------------------------------------------------ history
def _payload(payloads: Any) -> Any:
    """The first payload of a Payloads message, decoded (the pydantic converter writes plain JSON)."""
    items = list(payloads.payloads) if payloads is not None else []
    if not items:
        return None
    return json.loads(items[0].data or b"null")


def _payload_one(payload: Any) -> Any:
    """One payload, decoded; None where it is not JSON."""
    try:
        return json.loads(payload.data or b"null")
    except (ValueError, AttributeError):
        return None


def _when(event) -> datetime:
    return event.event_time.ToDatetime().replace(tzinfo=timezone.utc)


async def _segments(client: Client, workflow_id: str, last_run_id: str) -> list[tuple[str, Any]]:
    """(run id, history) of every segment, first to last, walking back over continue-as-new."""
    out = []
    run_id: str | None = last_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        out.append((run_id, history))
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id or None
    return out[::-1]


class _HistoryFacts(BaseModel):
    spec: RunSpec | None = None
    setup: RunSetup | None = None
    evals: list[tuple[datetime, int, EvalResult]] = Field(default_factory=list)  # end time, attempt, result
    compactions: list[tuple[datetime, str]] = Field(default_factory=list)  # when, its notebook line
    hops: list[tuple[datetime, int]] = Field(default_factory=list)  # when, events in the segment
    retries: list[tuple[datetime, str]] = Field(default_factory=list)
    faults: list[tuple[datetime, str]] = Field(default_factory=list)
    notebook: list[str] = Field(default_factory=list)  # the notebook activity's summaries
    result: RunReport | None = None
    eval_workers: dict[str, int] = Field(default_factory=dict)  # evaluations completed, by the worker that ran them
    timed: bool | None = None  # the last timed verdict's timing_meaningful


def _sweep_check(inp: dict, spec: RunSpec | None) -> bool:
    """Whether an evaluation is the run's closing sweep check of its best kernel: it is not one of the
    attempt's own evaluations (the ledger keeps it apart, as best_sweep), so it must not take their place."""
    shapes = (inp.get("settings") or {}).get("shapes")
    return shapes == "sweep" and spec is not None and spec.eval.shapes != "sweep"


def _read_histories(segments: list[tuple[str, Any]]) -> _HistoryFacts:
    facts = _HistoryFacts()
    for _, history in segments:
        scheduled: dict[int, tuple[str, Any]] = {}
        started_by: dict[int, str] = {}
        for ev in history.events:
            if ev.HasField("workflow_execution_started_event_attributes") and facts.spec is None:
                raw = _payload(ev.workflow_execution_started_event_attributes.input)
                try:
                    facts.spec = RunSpec.model_validate(raw)
                except Exception:  # a run started with bad input fails at once; nothing else to read
                    pass
            elif ev.HasField("activity_task_scheduled_event_attributes"):
                a = ev.activity_task_scheduled_event_attributes
                scheduled[ev.event_id] = (a.activity_type.name, _payload(a.input))
            elif ev.HasField("activity_task_started_event_attributes"):
                a = ev.activity_task_started_event_attributes
                started_by[a.scheduled_event_id] = a.identity
                if a.attempt > 1:
                    name = scheduled.get(a.scheduled_event_id, ("?", None))[0]
                    why = one_line(a.last_failure.message, 200) if a.HasField("last_failure") else ""
                    facts.retries.append((_when(ev), f"{name}: attempt {a.attempt}" + (f" after: {why}" if why else "")))
            elif ev.HasField("activity_task_completed_event_attributes"):
                a = ev.activity_task_completed_event_attributes
                name, inp = scheduled.get(a.scheduled_event_id, ("?", None))
                if name in names.EVAL_TOOLS:
                    res = EvalResult.model_validate(_payload(a.result))
                    v = res.verdict
                    who = worker_name(started_by.get(a.scheduled_event_id) or "?", v.device, v.gpu.name if v.gpu else "")
                    facts.eval_workers[who] = facts.eval_workers.get(who, 0) + 1
                    if any(r.latency_us is not None for r in v.shapes) or v.metric is not None:
                        facts.timed = v.timing_meaningful
                if name in names.EVAL_TOOLS and isinstance(inp, dict) and not _sweep_check(inp, facts.spec):
                    facts.evals.append((_when(ev), int(inp.get("attempt", -1)), res))
                elif name == names.PREPARE_RUN and facts.setup is None:
                    facts.setup = RunSetup.model_validate(_payload(a.result))
                elif name == names.COMPACT:
                    try:
                        line = CompactResult.model_validate(_payload(a.result)).line()
                    except Exception:  # a result of another shape: the event stands without its line
                        line = ""
                    facts.compactions.append((_when(ev), line))
            elif ev.HasField("activity_task_failed_event_attributes"):
                a = ev.activity_task_failed_event_attributes
                name = scheduled.get(a.scheduled_event_id, ("?", None))[0]
                facts.faults.append((_when(ev), f"{name} failed after its retries: {one_line(a.failure.message, 200)}"))
            elif ev.HasField("activity_task_timed_out_event_attributes"):
                a = ev.activity_task_timed_out_event_attributes
                name = scheduled.get(a.scheduled_event_id, ("?", None))[0]
                facts.faults.append((_when(ev), f"{name} timed out: {one_line(a.failure.message, 200)}"))
            elif ev.HasField("workflow_task_failed_event_attributes"):
                a = ev.workflow_task_failed_event_attributes
                facts.faults.append((_when(ev), f"workflow task failed: {one_line(a.failure.message, 200)}"))
            elif ev.HasField("marker_recorded_event_attributes") and ev.HasField("user_metadata"):
                line = _payload_one(ev.user_metadata.summary)
                if isinstance(line, str) and line:
                    facts.notebook.append(line)
            elif ev.HasField("workflow_execution_continued_as_new_event_attributes"):
                facts.hops.append((_when(ev), len(history.events)))
            elif ev.HasField("workflow_execution_completed_event_attributes"):
                raw = _payload(ev.workflow_execution_completed_event_attributes.result)
                if raw is not None:
                    facts.result = RunReport.model_validate(raw)
    return facts


# ------------------------------------------------------------------------------------ the run
async def _queries(client: Client, workflow_id: str) -> tuple[RunStatus, list[Attempt], BestReport | None]:
    handle = client.get_workflow_handle(workflow_id)

    async def ask():
        st = await handle.query("status", result_type=RunStatus)
        attempts = await handle.query("attempts", result_type=list[Attempt])
        best = await handle.query("best", result_type=BestReport | None)
        return st, attempts, best

    try:
        return await asyncio.wait_for(ask(), QUERY_TIMEOUT_S)
    except (asyncio.TimeoutError, RPCError) as exc:
        why = "no worker answered" if isinstance(exc, asyncio.TimeoutError) else one_line(str(exc), 160)
        raise ReportError(f"run {workflow_id!r} has not finished and its queries got no answer ({why}): "
                          f"is a worker serving it?") from None


def _hours(since: datetime, when: datetime) -> float:
    return max(0.0, (when - since).total_seconds() / 3600.0)


def _source(text: str | None, sha256: str | None, store: ArtifactStore | None) -> str | None:
    if text is not None:
        return text
    if sha256 and store is not None and store.has(sha256):
        return store.get(sha256)
    return None


async def collect(client: Client, workflow_id: str, store: ArtifactStore | None = None,
                  now: datetime | None = None) -> RunFacts:
    """Everything the report shows about `workflow_id`, from the server `client` talks to."""
    now = now or datetime.now(timezone.utc)
    try:
        desc = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise ReportError(f"no run {workflow_id!r}") from None
        raise
    if desc.workflow_type != names.WORKFLOW_TYPE:
        raise ReportError(f"{workflow_id!r} is a {desc.workflow_type} workflow, not a marathon run")
    segments = await _segments(client, workflow_id, desc.run_id)
    hist = _read_histories(segments)
    started_at = _when(segments[0][1].events[0])
    status_name = desc.status.name if desc.status else "UNKNOWN"
    finished = desc.status not in (None, WorkflowExecutionStatus.RUNNING)
    ended_at = desc.close_time if finished else None

    status: RunStatus | None = None
    if hist.result is not None:
        rep = hist.result
        attempts, best = rep.ledger, rep.best
        policy, stop_reason, tool_calls = rep.policy, rep.stop_reason, rep.tool_calls
        compactions_count, notes = rep.compactions, rep.notes
        agents = rep.agents
    else:
        agents = []
        status, attempts, best = await _queries(client, workflow_id)
        policy, stop_reason, tool_calls = status.policy, status.stop_reason or "", status.tool_calls
        compactions_count, notes = status.compactions, []
    spec = hist.spec
    setup = hist.setup

    # each attempt's k-th evaluation is the k-th completed evaluation activity of that attempt
    ends: dict[int, list[tuple[datetime, EvalResult]]] = {}
    for when, n, res in hist.evals:
        ends.setdefault(n, []).append((when, res))
    points: list[EvalPoint] = []
    rows: list[AttemptRow] = []
    for a in attempts:
        timed = ends.get(a.n, [])
        # evaluations pruned from a long run's carried state are the oldest: align from the end
        offset = max(0, len(timed) - len(a.evals))
        last_hours = None
        for k, d in enumerate(a.evals):
            when = timed[offset + k][0] if offset + k < len(timed) else None
            hours = _hours(started_at, when) if when else None
            last_hours = hours if hours is not None else last_hours
            points.append(EvalPoint(attempt=a.n, tool=d.tool, mode=d.mode, status=d.status, reason=d.reason,
                                    tool_call=d.tool_call, hours=hours, speedup=d.speedup, baseline=d.baseline,
                                    latency_us=d.latency_us, roofline_pct=d.roofline_pct))
        be = a.best_eval()
        last = a.evals[-1] if a.evals else None
        shown = be or last
        shown_k = next((k for k, d in enumerate(a.evals) if d is shown), None)
        shown_res = (timed[offset + shown_k][1] if shown_k is not None and offset + shown_k < len(timed) else None)
        last_res = timed[-1][1] if timed and last is not None else None
        rows.append(AttemptRow(n=a.n, origin=a.origin, parent=a.parent, tool_call=a.tool_call, config=a.config,
                               status=a.status,
                               reason=(last_res.verdict.reason if last_res is not None else last.reason if last else ""),
                               speedup=shown.speedup if shown else None, baseline=shown.baseline if shown else None,
                               latency_us=shown.latency_us if shown else None,
                               roofline_pct=shown.roofline_pct if shown else None, evaluations=len(a.evals),
                               hours=last_hours,
                               shapes=[ShapeFigure.of(r) for r in shown_res.verdict.shapes] if shown_res else []))
    points.sort(key=lambda p: (p.tool_call, p.attempt))

    best_ncu = None
    if best is not None:
        for _, n, res in hist.evals:
            if n == best.attempt and res.ncu and res.digest.status == "ok":
                best_ncu = res.ncu

    notebook: list[str] = []
    if store is not None and store.notebook_path(workflow_id).is_file():
        notebook = store.notebook_path(workflow_id).read_text(encoding="utf-8").splitlines()
    if not notebook:
        notebook = hist.notebook or (status.notebook if status else [])

    hours = (_hours(started_at, ended_at or now) if hist.result is None else hist.result.hours)
    by_worker = dict(hist.eval_workers)
    for line in agents:  # each agent's evaluations are in its own history
        try:
            child = await client.get_workflow_handle(line.workflow_id).describe()
            for who, k in _read_histories(await _segments(client, line.workflow_id, child.run_id)).eval_workers.items():
                by_worker[who] = by_worker.get(who, 0) + k
        except RPCError:  # an agent's history gone (retention): its evaluations are not counted
            pass
    return RunFacts(
        workflow_id=workflow_id, run_ids=[r for r, _ in segments], problem=spec.problem if spec else "?",
        problem_source=spec.problem_source if spec else None, task=spec.task if spec else None,
        policy=policy, temporal_status=status_name,
        finished=finished, phase=status.phase if status else ("finished" if hist.result else status_name.lower()),
        step=status.step if status else "", stop_reason=stop_reason, started_at=started_at, ended_at=ended_at,
        generated_at=now, hours=hours, tool_calls=tool_calls,
        tool_calls_budget=status.tool_calls_budget if status else (spec.budgets.max_tool_calls if spec else None),
        hours_budget=status.hours_budget if status else (spec.budgets.hours if spec else None),
        device=setup.device if setup else (spec.eval.device if spec else ""),
        shapes=setup.shapes if setup else [],
        baselines=(setup.baselines if setup and setup.baselines
                   else sorted({k for e in hist.evals for r in e[2].verdict.shapes for k in r.baselines})),
        attempts=rows, evaluations=points, best=best,
        best_source=_source(best.source, best.sha256, store) if best else None, best_ncu=best_ncu,
        start_source=_source(setup.start.text, setup.start.sha256, store) if setup else None,
        start_label=setup.kernel_label if setup else "",
        compactions=[TimedEvent(hours=_hours(started_at, t), what=line or f"compaction {i + 1}")
                     for i, (t, line) in enumerate(hist.compactions)],
        compactions_count=max(compactions_count, len(hist.compactions)),
        hops=[TimedEvent(hours=_hours(started_at, t), what=f"continue-as-new {i + 1} after a segment of {n} events")
              for i, (t, n) in enumerate(hist.hops)],
        retries=[TimedEvent(hours=_hours(started_at, t), what=w) for t, w in hist.retries],
        faults=[TimedEvent(hours=_hours(started_at, t), what=w) for t, w in hist.faults],
        best_sweep=(f"{hist.result.best_sweep.status}: {one_line(hist.result.best_sweep.reason, 300)}"
                    if hist.result is not None and hist.result.best_sweep else None),
        notebook=notebook, notes=notes, agents=agents,
        evaluations_by_worker=dict(sorted(by_worker.items())),
        timed=hist.timed if hist.timed is not None else (
            None if spec and spec.task else False if spec and spec.eval.device == "cpu" else None))
