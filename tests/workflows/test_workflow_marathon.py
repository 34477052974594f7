"""Acceptance: a scripted 1,000-tool-call run on a real dev server completes with at least two
continue-as-new hops, every segment's history under 4 MB, and every tool call recorded exactly once.
Mostly cheap tools (note, list, show, write) so it runs in a couple of minutes on a CPU; the starting
kernel's profile is a real evaluation in the Triton interpreter."""
from __future__ import annotations

import asyncio
import json

import pytest

from compaction.prompt import estimate_tokens, tools_tokens
from serving.scripted_model import FakeOpenAI, Reply, completion
from marathon_support import fake_model_spec, mla_variant, segments, start, workers
from workflows.models import Budgets, RunSpec, ToolCallRecord
from workflows.toolspec import TOOLS

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

CALLS_PER_TURN = 5
FOUR_MB = 4 * 1024 * 1024


def scripted_calls(turn: int) -> list[tuple[str, object]]:
    """Turn t's tool calls: notes, listings, sources, a new kernel every tenth turn, a malformed call
    every 25th."""
    calls: list[tuple[str, object]] = []
    for i in range(CALLS_PER_TURN):
        k = (turn * CALLS_PER_TURN + i) % 7
        if turn % 25 == 0 and i == 0:
            calls.append(("edit_kernel", '{"old": "x", "new": '))
        elif turn % 10 == 0 and i == 1:
            calls.append(("write_kernel", {"source": mla_variant(BLOCK_S=(8, 16, 32, 64)[turn % 4])}))
        elif k in (0, 3):
            calls.append(("note", {"text": f"turn {turn}, call {i}: the state loads dominate; " + "detail " * 40}))
        elif k in (1, 4):
            calls.append(("list_attempts", {"limit": 20}))
        elif k == 5:
            calls.append(("show_kernel", {"attempt": 0}))
        else:
            calls.append(("show_kernel", {}))
    return calls


def script(turn: int, delivery: int, request: dict) -> Reply:
    if turn < 0:  # a compaction summary: garbage, so the deterministic fallback runs and the run goes on
        return completion("I summarized nothing, sorry.")
    return completion(f"turn {turn}", scripted_calls(turn), turn=turn, prompt_tokens=5000, completion_tokens=300)


def spec_for(base_url: str, gpu_queue: str, tool_calls: int = 1000) -> RunSpec:
    return fake_model_spec(base_url, gpu_queue, Budgets(max_tool_calls=tool_calls), continue_as_new_every=60,
                           compact_every=40, context_budget=16000)


def test_thousand_tool_calls_with_continue_as_new(client, task_queues, tmp_path):
    asyncio.run(_marathon(client, task_queues, tmp_path))


async def _marathon(client, task_queues, tmp_path):
    tq, gq = task_queues
    with FakeOpenAI(script) as fake:
        async with workers(client, tq, gq, tmp_path / "artifacts"):
            handle = await start(client, spec_for(fake.base_url, gq), tq)
            report = await handle.result()
            ledger = await handle.query("ledger", result_type=list[ToolCallRecord])
            runs = await segments(client, handle.id, handle.result_run_id)

    assert report.tool_calls == 1000, report.stop_reason
    assert report.continue_as_new >= 2 and len(runs) == report.continue_as_new + 1
    for seg in runs:
        assert seg["bytes"] < FOUR_MB, f"segment {seg['run_id']}: {seg['bytes']} bytes"
    assert report.compactions >= 10

    # every tool call exactly once, in the order the model asked for them
    assert [r.seq for r in ledger] == list(range(1, 1001))
    turns = sorted({s.turn for s in fake.seen if s.turn >= 0})
    expected = ["start"] + [f"call_{t}_{i}" for t in turns for i in range(len(scripted_calls(t)))]
    assert [r.call_id for r in ledger] == expected[:1000]
    assert sum(1 for r in ledger if not r.ok) == sum(1 for t in turns if t % 25 == 0)  # only the malformed ones

    # goal conditioning: every prompt within the budget, the goal block first
    for s in fake.seen:
        if s.turn >= 0:
            assert estimate_tokens(s.request["messages"]) + tools_tokens(TOOLS) <= 16000
            assert s.request["messages"][0]["role"] == "system" and "mla_decode" in s.request["messages"][0]["content"]
    json.loads(report.model_dump_json())
