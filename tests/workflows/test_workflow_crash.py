"""Acceptance: a worker killed with SIGKILL in the middle of an evaluation. The run completes once a new
worker starts; no completed tool call is lost or repeated; the evaluation resumes on the new worker
within the heartbeat timeout plus a few seconds."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest
from temporalio.api.enums.v1 import PendingActivityState

from serving.scripted_model import FakeOpenAI, completion
from marathon_support import mla_variant, start
from serving.chaos import spawn_worker, stop_process
from workflows.models import Budgets, EvalSettings, ModelSettings, RunSpec, ToolCallRecord

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

HEARTBEAT_S = 5.0
SCRIPT = {1: [("write_kernel", {"source": mla_variant(BLOCK_S=32)})], 2: [("test_kernel", {})],
          3: [("note", {"text": "the test survived a dead worker"})]}


def script(turn, delivery, request):
    return completion(f"turn {turn}", SCRIPT.get(turn, []), turn=turn)


def test_sigkill_worker_mid_evaluation(temporal_server, client, task_queues, tmp_path):
    asyncio.run(_crash(temporal_server.address, client, task_queues, tmp_path))


async def _crash(address, client, task_queues, tmp_path):
    """The workers are processes of their own (serving/chaos.py spawn_worker), on the shared server."""
    tq, gq = task_queues
    procs: list[subprocess.Popen] = []
    try:
        with FakeOpenAI(script) as fake:
            spec = RunSpec(problem="mla_decode", model=ModelSettings(model="fake", base_url=fake.base_url, api_key_env=""),
                           budgets=Budgets(max_tool_calls=4),
                           eval=EvalSettings(device="cpu", heartbeat_timeout_s=HEARTBEAT_S), gpu_task_queue=gq)
            first = spawn_worker(address, tq, gq, tmp_path / "artifacts")
            procs.append(first)
            handle = await start(client, spec, tq)

            # wait until test_kernel (tool call 3) is running on the first worker, then kill it
            deadline = time.monotonic() + 300
            while True:
                assert time.monotonic() < deadline, "test_kernel never started"
                desc = await handle.describe()
                running = [p for p in desc.raw_description.pending_activities
                           if p.activity_type.name == "test_kernel"
                           and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED]
                if running:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)  # well inside the evaluation
            os.kill(first.pid, signal.SIGKILL)
            first.wait()
            killed_at = time.time()
            procs.append(spawn_worker(address, tq, gq, tmp_path / "artifacts"))

            report = await asyncio.wait_for(handle.result(), 300)
            ledger = await handle.query("ledger", result_type=list[ToolCallRecord])
            history = await handle.fetch_history()
    finally:
        for p in procs:
            stop_process(p)

    assert report.tool_calls == 4 and report.stop_reason.startswith("tool-call budget spent")
    # no completed tool call lost or repeated: each ran once, in order, and each activity completed once
    assert [(r.seq, r.call_id) for r in ledger] == [(1, "start"), (2, "call_1_0"), (3, "call_2_0"), (4, "call_3_0")]
    assert ledger[2].tool == "test_kernel" and ledger[2].ok, ledger[2].summary
    completed: dict[str, int] = {}
    scheduled: dict[int, str] = {}
    restarted_at = None
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            scheduled[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.HasField("activity_task_started_event_attributes"):
            a = e.activity_task_started_event_attributes
            if scheduled[a.scheduled_event_id] == "test_kernel":
                assert a.attempt == 2  # the killed attempt, then the one that completed
                restarted_at = e.event_time.ToDatetime().timestamp()
        elif e.HasField("activity_task_completed_event_attributes"):
            name = scheduled[e.activity_task_completed_event_attributes.scheduled_event_id]
            completed[name] = completed.get(name, 0) + 1
    assert completed == {"prepare_run": 1, "profile_kernel": 1, "write_kernel": 1, "test_kernel": 1, "note": 1,
                         "agent_turn": 3}
    # the evaluation moved to the new worker within the heartbeat timeout plus a few seconds
    assert restarted_at is not None
    resumed_after = restarted_at - killed_at
    assert resumed_after <= HEARTBEAT_S + 8.0, f"resumed {resumed_after:.1f} s after the kill"
    print(f"\nresumed {resumed_after:.1f} s after SIGKILL (heartbeat timeout {HEARTBEAT_S:.0f} s)")
