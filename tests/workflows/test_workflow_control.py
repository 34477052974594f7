"""Control and inspection of a live run: pause, resume, hint, extend and stop (updates); status, attempts,
best and ledger (queries); the custom search attributes; the time budget."""
from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowUpdateFailedError

from serving.scripted_model import FakeOpenAI, completion
from marathon_support import fake_model_spec, mla_variant, start, workers
from workflows import names
from workflows.models import Attempt, BestReport, Budgets, Extension, RunStatus

pytestmark = pytest.mark.timeout(600)


def script(turn, delivery, request):
    if turn < 0:
        return completion("no summary")
    calls = [("note", {"text": f"turn {turn}"}), ("list_attempts", {})]
    if turn == 1:
        calls.append(("write_kernel", {"source": mla_variant(BLOCK_S=32)}))
    return completion(f"turn {turn}", calls, turn=turn)


async def wait_for(pred, timeout=120.0, every=0.2):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await pred()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(every)


def test_pause_hint_extend_resume_stop(client, task_queues, tmp_path):
    asyncio.run(_control(client, task_queues, tmp_path))


async def _control(client, task_queues, tmp_path):
    tq, gq = task_queues
    with FakeOpenAI(script) as fake:
        spec = fake_model_spec(fake.base_url, gq, Budgets(max_tool_calls=400))
        async with workers(client, tq, gq, tmp_path / "artifacts"):
            handle = await start(client, spec, tq)

            async def status() -> RunStatus:
                return await handle.query("status", result_type=RunStatus)

            await wait_for(lambda: _at_least(status, 8))
            assert (await handle.execute_update("pause", result_type=str)).startswith("paused")
            s1 = await wait_for(lambda: _phase(status, "paused"))
            await asyncio.sleep(2.0)
            s2 = await status()
            assert s2.tool_calls == s1.tool_calls and s2.phase == "paused"  # nothing runs while paused
            assert s2.hours_used == pytest.approx(s1.hours_used, abs=1e-4)  # paused time does not count

            await handle.execute_update("hint", "try BLOCK_S=64 with 8 warps")
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update("hint", "   ")  # rejected by the validator
            ext = await handle.execute_update("extend", Extension(tool_calls=100, hours=1.0), result_type=RunStatus)
            assert ext.tool_calls_budget == 500 and ext.hours_budget == 25.0
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update("extend", {"tool_calls": -5})  # (Extension itself refuses it)
            turns_before = len([s for s in fake.seen if s.turn >= 0])
            await handle.execute_update("resume", result_type=str)
            await wait_for(lambda: _at_least(status, s2.tool_calls + 6))
            after = [s for s in fake.seen if s.turn >= 0][turns_before:]
            assert any("try BLOCK_S=64 with 8 warps" in m.get("content", "") for s in after[:1]
                       for m in s.request["messages"] if m["role"] == "user")  # the hint reached the model

            attempts = await handle.query("attempts", result_type=list[Attempt])
            best = await handle.query("best", result_type=BestReport | None)
            assert [a.origin for a in attempts] == ["start", "write"]
            assert best is not None and best.attempt == 0 and best.verdict.status == "ok"
            desc = await handle.describe()
            sa = desc.typed_search_attributes
            assert sa.get(names.SA_PROBLEM) == "mla_decode" and sa.get(names.SA_POLICY) == "llm"
            assert sa.get(names.SA_TOOL_CALLS) >= 1 and sa.get(names.SA_BEST_SPEEDUP) is not None

            await handle.execute_update("stop", "enough for today")
            report = await handle.result()
    assert report.stop_reason == "stopped: enough for today"
    assert report.tool_calls < 500 and report.best.attempt == 0


async def _at_least(status, n):
    s = await status()
    return s if s.tool_calls >= n else None


async def _phase(status, phase):
    s = await status()
    return s if s.phase == phase else None


def test_time_budget_ends_the_run(client, task_queues, tmp_path):
    asyncio.run(_time_budget(client, task_queues, tmp_path))


async def _time_budget(client, task_queues, tmp_path):
    tq, gq = task_queues
    with FakeOpenAI(script) as fake:
        spec = fake_model_spec(fake.base_url, gq, Budgets(hours=0.005, max_tool_calls=100_000))
        async with workers(client, tq, gq, tmp_path / "artifacts"):
            report = await (await start(client, spec, tq)).result()
    assert report.stop_reason.startswith("time budget spent") and report.hours >= 0.005
