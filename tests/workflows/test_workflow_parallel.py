"""The tuner with `parallel` evaluations: configurations profiled at once on two GPU workers (here two
CPU evaluation workers on one GPU queue), every configuration once, every tool call numbered once."""
from __future__ import annotations

import asyncio
import json

import pytest

from marathon_support import start, workers
from workflows.models import Budgets, EvalSettings, RunSpec

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def test_tuner_profiles_two_configurations_at_once(client, task_queues, tmp_path):
    asyncio.run(_parallel(client, task_queues, tmp_path))


async def _parallel(client, task_queues, tmp_path):
    tq, gq = task_queues
    # 7 tool calls: the start's profile, then two configurations at once (2 writes, 2 profiles), then
    # one more (the budget leaves room for one configuration's 2 calls)
    spec = RunSpec(problem="mla_decode", budgets=Budgets(max_tool_calls=7),
                   eval=EvalSettings(device="cpu", parallel=2), gpu_task_queue=gq)
    async with workers(client, tq, gq, tmp_path / "a"), \
            workers(client, tq, gq, tmp_path / "b", control=False):
        handle = await start(client, spec, tq)
        report = await handle.result()
        history = await handle.fetch_history()
    assert report.tool_calls == 7 and report.attempts == 4
    seqs = [a.tool_call for a in report.ledger[1:]] + [e.tool_call for a in report.ledger for e in a.evals]
    assert sorted(seqs) == list(range(1, 8))  # every tool call numbered once, calls in flight together too
    configs = [json.dumps(a.config, sort_keys=True) for a in report.ledger]
    assert len(configs) == len(set(configs)) == 4  # no configuration twice
    assert all(e.status == "ok" for a in report.ledger for e in a.evals)

    # two profiles were in flight together: both scheduled before either completed
    scheduled: dict[int, float] = {}
    completed: dict[int, float] = {}
    for ev in history.events:
        if ev.HasField("activity_task_scheduled_event_attributes"):
            if ev.activity_task_scheduled_event_attributes.activity_type.name == "profile_kernel":
                scheduled[ev.event_id] = ev.event_id
        elif ev.HasField("activity_task_completed_event_attributes"):
            sid = ev.activity_task_completed_event_attributes.scheduled_event_id
            if sid in scheduled:
                completed[sid] = ev.event_id
    assert len(scheduled) == 4  # the start's profile and three configurations
    overlapping = [(a, b) for a in scheduled for b in scheduled
                   if a < b and b < completed[a]]  # b was scheduled while a was still running
    assert overlapping, f"no two profiles ran at once: scheduled {sorted(scheduled)}, completed {completed}"
