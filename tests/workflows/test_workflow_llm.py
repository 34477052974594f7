"""The llm policy end to end: a real dev server, real workers, real Triton kernels judged in the interpreter,
and a fake OpenAI-compatible server that scripts the model: 429 with retry-after, 500, malformed tool
arguments, an edit that does not apply, a wrong kernel."""
from __future__ import annotations

import asyncio
import json

import pytest

from serving.scripted_model import FakeOpenAI, completion, error
from marathon_support import mla_variant, mla_wrong, start, workers
from workflows.models import Attempt, Budgets, EvalSettings, ModelSettings, RunSpec, ToolCallRecord
from workflows.toolspec import TOOLS

pytestmark = pytest.mark.timeout(600)

FAST = mla_variant(BLOCK_S=32)
SCRIPT = {
    1: [("show_kernel", {}), ("note", {"text": "plan: try BLOCK_S=32 first, then 64"})],
    2: [("write_kernel", {"source": FAST}), ("edit_kernel", '{"old": "BLOCK_S", "new": ')],  # malformed JSON
    3: [("compile_kernel", {}), ("test_kernel", {})],
    4: [("profile_kernel", {})],
    5: [("edit_kernel", {"old": "no such text", "new": "x"}),
        ("edit_kernel", {"old": "'BLOCK_S': 32", "new": "'BLOCK_S': 64"})],
    6: [("write_kernel", {"source": mla_wrong()}), ("test_kernel", {})],
    7: [("list_attempts", {}), ("show_kernel", {"attempt": -1})],
}
BUDGET = 1 + sum(len(v) for v in SCRIPT.values())  # + the workflow's own profile of the starting kernel


def script(turn: int, delivery: int, request: dict):
    if turn == 1 and delivery == 1:
        return error(429, "slow down", retry_after=1.5)
    if turn == 2 and delivery == 1:
        return error(500, "upstream exploded")
    if turn in SCRIPT:
        return completion(f"turn {turn}: here is my next step", SCRIPT[turn], turn=turn,
                          prompt_tokens=1000 + turn, completion_tokens=50)
    return completion("nothing more to do", turn=turn)


def test_llm_run_with_real_kernels_and_faults(client, task_queues, tmp_path):
    asyncio.run(_llm_run(client, task_queues, tmp_path))


async def _llm_run(client, task_queues, tmp_path):
    tq, gq = task_queues
    with FakeOpenAI(script) as fake:
        spec = RunSpec(problem="mla_decode", model=ModelSettings(model="fake", base_url=fake.base_url,
                                                                 api_key_env="MARATHON_TEST_KEY", retry_initial_s=0.5),
                       budgets=Budgets(max_tool_calls=BUDGET), eval=EvalSettings(device="cpu"), gpu_task_queue=gq)
        async with workers(client, tq, gq, tmp_path / "artifacts"):
            handle = await start(client, spec, tq)
            report = await handle.result()
            ledger = await handle.query("ledger", result_type=list[ToolCallRecord])
            attempts = await handle.query("attempts", result_type=list[Attempt])

    assert report.policy == "llm"
    assert report.tool_calls == BUDGET and report.stop_reason.startswith("tool-call budget spent")
    assert [r.seq for r in ledger] == list(range(1, BUDGET + 1))
    expected_ids = ["start"] + [f"call_{t}_{i}" for t in sorted(SCRIPT) for i in range(len(SCRIPT[t]))]
    assert [r.call_id for r in ledger] == expected_ids  # each scripted call ran once, in order

    # the faults: the 429 and the 500 were retried by Temporal, the 429 no sooner than its retry-after
    turn1 = [s for s in fake.seen if s.turn == 1]
    assert [s.delivery for s in turn1] == [1, 2] and turn1[1].at - turn1[0].at >= 1.4
    assert [s.delivery for s in fake.seen if s.turn == 2] == [1, 2]
    assert report.tokens.calls == len(SCRIPT)
    assert report.tokens.prompt_tokens == sum(1000 + t for t in SCRIPT)

    by_id = {r.call_id: r for r in ledger}
    assert not by_id["call_2_1"].ok and "not valid JSON" in by_id["call_2_1"].summary
    assert not by_id["call_5_0"].ok and "does not occur" in by_id["call_5_0"].summary
    assert by_id["call_5_1"].ok

    # the model read the malformed-arguments error back on its next turn, next to its call
    req3 = next(s.request for s in fake.seen if s.turn == 3)
    tool_msgs = {m["tool_call_id"]: m["content"] for m in req3["messages"] if m["role"] == "tool"}
    assert "not valid JSON" in tool_msgs["call_2_1"]
    assert [t["function"]["name"] for t in req3["tools"]] == [t["function"]["name"] for t in TOOLS]
    assert "mla_decode" in req3["messages"][0]["content"]  # the goal block

    # attempts: 0 start, 1 written (compiled, tested, profiled), 2 edited, 3 the wrong one
    assert [a.origin for a in attempts] == ["start", "write", "edit", "write"]
    assert [e.tool for e in attempts[1].evals] == ["compile_kernel", "test_kernel", "profile_kernel"]
    assert all(e.status == "ok" for e in attempts[1].evals)
    assert attempts[2].config == {"BLOCK_S": 64, "num_warps": 4} and attempts[2].parent == 1
    assert attempts[3].evals[-1].status == "incorrect"

    # the best kernel: an ok profile, with its source and the verdict in `marathon eval --json` form
    assert report.best is not None and report.best.attempt in (0, 1)
    assert report.best.verdict.status == "ok" and report.best.verdict.mode == "full"
    assert report.best.source and "def mla_decode" in report.best.source
    json.loads(report.best.verdict.model_dump_json())
