"""`marathon runs`: what ran, from Temporal visibility and the search attributes the workflow upserts
(MarathonProblem, MarathonPolicy, MarathonToolCalls, MarathonBestSpeedup), one row per workflow id."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pydantic import BaseModel
from temporalio.client import WorkflowExecutionStatus

from reports import local
from reports.make import connect, recorded
from workflows import names


class RunRow(BaseModel):
    workflow_id: str
    problem: str
    policy: str
    status: str
    started_at: datetime
    hours: float
    tool_calls: int | None = None
    best_speedup: float | None = None
    report: str | None = None
    server: str = ""  # the address, or the database under the state directory, it was read from


def parse_since(text: str) -> timedelta:
    """`24h`, `90m`, `3d`, `1w` → a timedelta; ValueError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", text or "")
    if not m:
        raise ValueError(f"--since {text!r}: give a number and a unit, e.g. 90m, 24h, 3d, 1w")
    value, unit = float(m.group(1)), m.group(2)
    unit_name = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[unit]
    return timedelta(**{unit_name: value})


def visibility_query(problem: str | None, since: timedelta | None, now: datetime) -> str:
    q = f"WorkflowType = '{names.WORKFLOW_TYPE}'"
    if problem:
        q += f" AND {names.SA_PROBLEM.name} = '{problem.replace(chr(39), '')}'"
    if since is not None:
        q += f" AND StartTime > '{(now - since).strftime('%Y-%m-%dT%H:%M:%SZ')}'"
    return q


async def rows_from(client, query: str, server: str, now: datetime) -> list[RunRow]:
    """One row per workflow id: its latest segment's status and attributes, hours from its first start."""
    latest: dict[str, object] = {}
    first_start: dict[str, datetime] = {}
    async for ex in client.list_workflows(query):
        first_start[ex.id] = min(first_start.get(ex.id, ex.start_time), ex.start_time)
        cur = latest.get(ex.id)
        if cur is None or ex.start_time > cur.start_time:
            latest[ex.id] = ex
    rows = []
    for wid, ex in latest.items():
        sa = ex.typed_search_attributes
        status = ex.status.name if ex.status else "UNKNOWN"
        end = ex.close_time if ex.status not in (None, WorkflowExecutionStatus.RUNNING) and ex.close_time else now
        rows.append(RunRow(workflow_id=wid, problem=sa.get(names.SA_PROBLEM) or "?", policy=sa.get(names.SA_POLICY) or "?",
                           status=status, started_at=first_start[wid],
                           hours=max(0.0, (end - first_start[wid]).total_seconds() / 3600),
                           tool_calls=sa.get(names.SA_TOOL_CALLS), best_speedup=sa.get(names.SA_BEST_SPEEDUP),
                           server=server))
    return rows


async def list_runs(state: Path, address: str | None = None, problem: str | None = None,
                    since: timedelta | None = None, namespace: str = "default",
                    now: datetime | None = None) -> list[RunRow]:
    """The runs on `address`, or on every database under `state`, newest first."""
    now = now or datetime.now(timezone.utc)
    query = visibility_query(problem, since, now)
    rows: list[RunRow] = []
    if address is not None:
        rows = await rows_from(await connect(address, namespace), query, address, now)
    else:
        for db in local.databases(state):
            with local.reading(db) as served_on:
                rows += await rows_from(await connect(served_on, namespace), query, str(db.relative_to(state)), now)
    reports = recorded(state)
    for r in rows:
        r.report = reports.get(r.workflow_id)
    return sorted(rows, key=lambda r: r.started_at, reverse=True)


def table(rows: list[RunRow]) -> str:
    if not rows:
        return "no runs"
    head = f"{'workflow id':<34} {'problem':<12} {'policy':<6} {'status':<10} {'hours':>6} {'calls':>6} {'best':>9}  report"
    lines = [head]
    for r in rows:
        best = f"{r.best_speedup:.3f}x" if r.best_speedup is not None else "-"
        calls = str(r.tool_calls) if r.tool_calls is not None else "-"
        lines.append(f"{r.workflow_id:<34} {r.problem:<12} {r.policy:<6} {r.status.lower():<10} {r.hours:>6.2f} "
                     f"{calls:>6} {best:>9}  {r.report or '-'}")
    return "\n".join(lines)
