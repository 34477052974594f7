"""`marathon report`: find the run (a server's address, or the database under the local state directory
that holds it), gather its facts, write the folder, and note where it went for `marathon runs`."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import AsyncIterator

from activities.artifacts import ArtifactStore
from reports import local
from reports.collect import ReportError, collect
from reports.render import check_out_dir, write_report
from workflows import names

INDEX = "index.json"  # STATE/reports/index.json: workflow id -> the report.html last written for it


class Unreachable(ReportError):
    """The Temporal server does not answer."""


async def connect(address: str, namespace: str = "default"):
    import worker
    try:
        return await worker.connect(address, namespace)
    except RuntimeError as exc:
        raise Unreachable(f"cannot reach the Temporal server at {address}") from exc


@contextlib.asynccontextmanager
async def client_for(workflow_id: str, state: Path, address: str | None, namespace: str = "default") -> AsyncIterator:
    """A client of the server that holds `workflow_id`: `address`, or the run's own database under
    `state` (an embedded run's), else `marathon dev`'s database there."""
    if address is not None:
        yield await connect(address, namespace)
        return
    own = local.run_db(state, workflow_id)
    # a run's own database first; then the others (`marathon dev`'s, an embedded suite's runs)
    for db in ([own] if own.is_file() else []) + [d for d in local.databases(state) if d != own]:
        with local.reading(db) as served_on:
            client = await connect(served_on, namespace)
            if await _holds(client, workflow_id):
                yield client
                return
    raise ReportError(f"no run or suite {workflow_id!r} under {state} (no database there holds it; give --state-dir or --address)")


async def _workflow_type(client, workflow_id: str) -> str | None:
    """The workflow's type, or None where the server holds no workflow of that id."""
    from temporalio.service import RPCError, RPCStatusCode
    try:
        return (await client.get_workflow_handle(workflow_id).describe()).workflow_type
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def _holds(client, workflow_id: str) -> bool:
    return await _workflow_type(client, workflow_id) is not None


def record(state: Path, workflow_id: str, html: Path) -> None:
    """Remember where the report of `workflow_id` was written (what `marathon runs` shows)."""
    path = state / local.REPORTS / INDEX
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError):
        index = {}
    index[workflow_id] = str(html.resolve())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
    tmp.replace(path)


def recorded(state: Path) -> dict[str, str]:
    """workflow id -> report.html, for the reports that still exist."""
    try:
        index = json.loads((state / local.REPORTS / INDEX).read_text())
    except (OSError, ValueError):
        index = {}
    found = {k: v for k, v in index.items() if Path(v).is_file()}
    for html in (state / local.REPORTS).glob("*/report.html"):
        marker = html.parent / ".marathon-report"
        if marker.is_file():
            found.setdefault(marker.read_text().strip(), str(html.resolve()))
    return found


async def write_for(client, workflow_id: str, state: Path, out: Path | None = None,
                    artifacts: Path | None = None) -> Path:
    """Gather and write the report of `workflow_id`; returns report.html's path."""
    out = Path(out) if out else local.report_dir(state, workflow_id)
    check_out_dir(out, workflow_id)  # before the server is asked anything
    store = ArtifactStore(artifacts or state / "artifacts")
    facts = await collect(client, workflow_id, store)
    html = write_report(facts, out)
    record(state, workflow_id, html)
    return html


async def write_suite_for(client, workflow_id: str, state: Path, out: Path | None = None,
                          artifacts: Path | None = None) -> Path:
    """A suite's report (reports/suite.py), each of its problems' runs' reports written too (where
    `marathon report RUN_ID` writes them) and linked from its rows; returns its report.html's path."""
    from reports.suite import collect_suite, link, write_suite_report
    out = Path(out) if out else local.report_dir(state, workflow_id)
    check_out_dir(out, workflow_id)
    facts = await collect_suite(client, workflow_id)
    for row in facts.rows:
        if row.status == "not run":
            continue
        try:
            row.report = link(await write_for(client, row.workflow_id, state, None, artifacts), out)
        except (ReportError, ValueError, OSError):  # a run not started yet, or a folder in the way: no link
            row.report = None
    html = write_suite_report(facts, out)
    record(state, workflow_id, html)
    return html


async def report(workflow_id: str, state: Path, address: str | None, out: Path | None,
                 artifacts: Path | None = None, namespace: str = "default") -> Path:
    """The report of a run, or of a suite (its own page, and its runs')."""
    if out is not None:
        check_out_dir(Path(out), workflow_id)
    async with client_for(workflow_id, state, address, namespace) as client:
        if await _workflow_type(client, workflow_id) == names.SUITE_WORKFLOW_TYPE:
            return await write_suite_for(client, workflow_id, state, out, artifacts)
        return await write_for(client, workflow_id, state, out, artifacts)  # an unknown id: its ReportError
