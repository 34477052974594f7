"""`marathon runs`: what ran, from Temporal visibility and the search attributes the workflow upserts
(MarathonProblem, MarathonPolicy, MarathonToolCalls, MarathonBestSpeedup), one row per workflow id, with
who started it: `marathon run`, `suite` and `schedule create` put the user and host in the run's memo
(STARTED_BY), which a suite's or a run's child runs take from their parent."""
from __future__ import annotations

import getpass
import re
import socket
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pydantic import BaseModel
from temporalio.client import WorkflowExecutionStatus

from compaction.text import one_line
from reports import local
from reports.fmt import speedup
from reports.make import connect, recorded
from workflows import names
from workflows.suite import SUITE_PROBLEMS


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
    started_by: str | None = None  # user@host, from the memo; None for a run started otherwise (temporal CLI)


STARTED_BY = "started_by"  # the memo key


def caller() -> str:
    """The user and host a run started here is marked with."""
    try:
        user = getpass.getuser()
    except Exception:  # no name for this uid (a container's)
        user = "?"
    return f"{user}@{socket.gethostname()}"


async def _memo(ex) -> dict:
    try:
        memo = await ex.memo()
    except Exception:  # a memo this converter cannot read
        return {}
    return memo if isinstance(memo, dict) else {}


async def _started_by(ex) -> str | None:
    who = (await _memo(ex)).get(STARTED_BY)
    return one_line(who, 60) if isinstance(who, str) and who else None  # shown in a table: one short line


async def _suite_problem(ex) -> str:
    """A suite's row's `problem`: how many problems it runs (its memo's count, where it carries one)."""
    count = (await _memo(ex)).get(SUITE_PROBLEMS)
    return f"suite of {count}" if isinstance(count, int) else "suite"


def parse_since(text: str) -> timedelta:
    """`24h`, `90m`, `3d`, `1w` → a timedelta; ValueError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", text or "")
    if not m:
        raise ValueError(f"--since {text!r}: give a number and a unit, e.g. 90m, 24h, 3d, 1w")
    value, unit = float(m.group(1)), m.group(2)
    unit_name = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[unit]
    return timedelta(**{unit_name: value})


def visibility_query(problem: str | None, since: timedelta | None, now: datetime) -> str:
    """Runs and suites (only runs when asked for a problem's: a suite has no problem of its own)."""
    if problem:
        q = f"WorkflowType = '{names.WORKFLOW_TYPE}' AND {names.SA_PROBLEM.name} = '{problem.replace(chr(39), '')}'"
    else:
        q = f"(WorkflowType = '{names.WORKFLOW_TYPE}' OR WorkflowType = '{names.SUITE_WORKFLOW_TYPE}')"
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
    owners = {wid: await _started_by(ex) for wid, ex in latest.items()}
    parents: dict[str, str | None] = {}
    for wid, ex in latest.items():  # a suite's or a run's child runs: their parent's starter
        parent = ex.parent_id
        if owners[wid] is None and parent:
            if parent not in parents:
                if parent in latest:
                    parents[parent] = owners[parent]
                else:
                    try:
                        parents[parent] = await _started_by(await client.get_workflow_handle(parent).describe())
                    except Exception:  # the parent is gone (retention)
                        parents[parent] = None
            owners[wid] = parents[parent]
    rows = []
    for wid, ex in latest.items():
        sa = ex.typed_search_attributes
        status = ex.status.name if ex.status else "UNKNOWN"
        end = ex.close_time if ex.status not in (None, WorkflowExecutionStatus.RUNNING) and ex.close_time else now
        suite = ex.workflow_type == names.SUITE_WORKFLOW_TYPE
        problem = await _suite_problem(ex) if suite else sa.get(names.SA_PROBLEM) or "?"
        rows.append(RunRow(workflow_id=wid, problem=problem, policy="-" if suite else sa.get(names.SA_POLICY) or "?",
                           status=status, started_at=first_start[wid],
                           hours=max(0.0, (end - first_start[wid]).total_seconds() / 3600),
                           tool_calls=sa.get(names.SA_TOOL_CALLS), best_speedup=sa.get(names.SA_BEST_SPEEDUP),
                           server=server, started_by=owners[wid]))
    return rows


async def list_runs(state: Path, address: str | None = None, problem: str | None = None,
                    since: timedelta | None = None, namespace: str = "default",
                    now: datetime | None = None, started_by: str | None = None) -> list[RunRow]:
    """The runs on `address`, or on every database under `state`, newest first; with `started_by`, only
    the runs that user@host started."""
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
    if started_by is not None:
        rows = [r for r in rows if r.started_by == started_by]
    return sorted(rows, key=lambda r: r.started_at, reverse=True)


def table(rows: list[RunRow]) -> str:
    """One line per run, each column as wide as its longest entry; `best` is the best kernel's speedup on
    its worst shape against the strongest baseline (on a CPU: noise)."""
    if not rows:
        return "no runs"
    head = ("workflow id", "problem", "policy", "status", "hours", "calls", "best speedup", "started by", "report")
    cells = [(r.workflow_id, r.problem, r.policy, r.status.lower(), f"{r.hours:.2f}",
              str(r.tool_calls) if r.tool_calls is not None else "-",
              speedup(r.best_speedup) if r.best_speedup is not None else "-", r.started_by or "-", r.report or "-")
             for r in rows]
    widths = [max(len(head[i]), *(len(c[i]) for c in cells)) for i in range(len(head) - 1)]
    right = {4, 5, 6}  # the numbers

    def line(c) -> str:
        padded = (f"{x:>{w}}" if i in right else f"{x:<{w}}" for i, (x, w) in enumerate(zip(c, widths)))
        return "  ".join(padded) + "  " + c[-1]

    return "\n".join([line(head)] + [line(c) for c in cells])
