"""Bad input at the door: a workflow (a run, a suite) started with a bad input fails at once,
non-retryable, naming the field: a number past its bound, a path where a name or a file's text belongs;
a bad update payload is rejected by the update's validator and the run goes on unharmed; a forged or
malformed fault signal does not outlive the run."""
from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from marathon_support import workers
from workflows import names
from workflows.control import FAULT_LINES, origin_refusal
from workflows.models import AgentRole, RunSpec, RunState, RunStatus

pytestmark = pytest.mark.timeout(120)

GOOD = {"problem": "mla_decode", "eval": {"device": "cpu"}}
# a state with an ok best at 999999x that nobody evaluated (a red team's forgery)
FORGED_CARRY = {"policy": "tuner", "stop_requested": "forged and done", "best": {
    "attempt": 0, "speedup": 999999.0, "source": {"sha256": "0" * 64, "text": "print('hi')\n", "lines": 1},
    "verdict": {"status": "ok", "reason": "FORGED", "problem": "mla_decode", "kernel": "forged", "mode": "full",
                "device": "cuda", "shapes": [{"shape": {"B": 1}, "correct": True, "latency_us": 0.001,
                                              "baselines": {"eager": 1000.0}, "speedup": {"eager": 999999.0}}]}}}
BAD_INPUTS = [  # (input, what the failure message must name)
    ({}, "problem"),
    ({"problem": "mla_decode", "budgets": {"hours": "abc"}}, "budgets.hours"),
    ({"problem": "mla_decode", "eval": {"parallel": 0}}, "eval.parallel"),
    ({"problem": "mla_decode", "budgets": {"hours": -1}}, "budgets.hours"),
    ({"problem": "mla_decode", "budgets": {"max_tool_calls": 0}}, "budgets.max_tool_calls"),
    ({"problem": "mla_decode", "eval": {"timeout_s": -1}}, "eval.timeout_s"),
    ({"problem": "mla_decode", "eval": {"device": "tpu"}}, "eval.device"),
    ({"problem": "mla_decode", "tool_timeout_s": 0}, "tool_timeout_s"),
    # past its bound: it would overflow a timer on every retry and leave the run RUNNING
    ({"problem": "mla_decode", "tool_timeout_s": 1e14}, "tool_timeout_s"),
    ({"problem": "mla_decode", "budgets": {"hours": 1e11}}, "budgets.hours"),
    ({"problem": "mla_decode", "eval": {"timeout_s": 1e14}}, "eval.timeout_s"),
    ({"problem": "mla_decode", "budgets": {"max_tool_calls": 10**9}}, "budgets.max_tool_calls"),
    ({"problem": "mla_decode", "model": {"request_timeout_s": 1e300}}, "model.request_timeout_s"),
    ({"problem": "mla_decode", "eval": {"shape_list": [{"B": 2**40}]}}, "eval.shape_list.0.B"),
    # hints are carried across continue-as-new in several copies: bounded in number and in size
    ({"problem": "mla_decode", "hints": ["x"] * 101}, "hints"),
    ({"problem": "mla_decode", "hints": ["h" * 8000] * 5}, "hints"),
    # a path where a name belongs: the worker reads no file a workflow input names
    ({"problem": "mla_decode", "kernel": "/some/secret.env"}, "kernel"),
    ({"problem": "mla_decode", "kernel": "../../secret.env"}, "kernel"),
    ({"problem": "/etc/passwd"}, "problem"),
    ({"problem": "../x", "problem_source": "class Model: pass"}, "problem"),
    ({"problem": "mla_decode", "gpu_task_queue": "a/b"}, "gpu_task_queue"),
    ({"problem": "mla_decode", "kernel": "secret.env"}, "kernel"),  # a name, but no shipped kernel's: prepare says so
    # the workflow's own fields: a state (a best, its verdict) nobody judged
    ({"problem": "mla_decode", "carry": {"budget_hours": 1}}, "carry"),
    ({"problem": "mla_decode", "agent": {"index": 1, "of": 2}}, "agent"),
    # a misspelled field is refused, not ignored (a `budgets.hour` would run for the default 24 hours)
    ({"problem": "mla_decode", "budgets": {"hour": 1}}, "budgets.hour"),
    ({"problem": "mla_decode", "evil": 1}, "evil"),
    (5, "input"),
    (None, "input"),  # `temporal workflow start` without --input
    ({"problem": "no_such_problem"}, "no_such_problem"),  # refused by the prepare activity
]


def test_bad_inputs_fail_the_workflow_at_once(client, task_queues, tmp_path):
    asyncio.run(_bad_inputs(client, task_queues, tmp_path))


async def _bad_inputs(client, task_queues, tmp_path):
    tq, gq = task_queues
    async with workers(client, tq, gq, tmp_path / "artifacts", gpu=False):
        handles = [await client.start_workflow(names.WORKFLOW_TYPE, *([] if raw is None else [raw]),
                                               id=f"bad-{uuid.uuid4().hex[:10]}", task_queue=tq)
                   for raw, _ in BAD_INPUTS]
        t0 = time.monotonic()
        for handle, (raw, field) in zip(handles, BAD_INPUTS):
            with pytest.raises(WorkflowFailureError) as info:
                await asyncio.wait_for(handle.result(), 30)
            cause = info.value.cause
            assert isinstance(cause, ApplicationError) and cause.non_retryable, (raw, cause)
            assert cause.type == "BadRunSpec" and field in cause.message and "\n" not in cause.message, cause.message
        assert time.monotonic() - t0 < 30  # all of them, not each
        # an agent's id on a workflow its run did not start: its verdicts would count as that run's own
        victim = f"victim-{uuid.uuid4().hex[:10]}"
        handle = await client.start_workflow(names.WORKFLOW_TYPE, GOOD, id=names.agent_id(victim, 2), task_queue=tq)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 30)
        cause = info.value.cause
        assert cause.type == "BadRunSpec" and cause.non_retryable and "workflow id" in cause.message, cause.message


def test_bad_update_payloads_are_rejected_and_the_run_goes_on(client, task_queues, tmp_path):
    asyncio.run(_bad_updates(client, task_queues, tmp_path))


async def _bad_updates(client, task_queues, tmp_path):
    tq, gq = task_queues
    # no GPU worker: the run waits on its first profile, RUNNING, while the workflow worker answers
    async with workers(client, tq, gq, tmp_path / "artifacts", gpu=False):
        handle = await client.start_workflow(names.WORKFLOW_TYPE, {**GOOD, "gpu_task_queue": gq},
                                             id=f"upd-{uuid.uuid4().hex[:10]}", task_queue=tq)
        before = await handle.query("status", result_type=RunStatus)
        bad = [("extend", {"hours": "abc"}, "hours"), ("extend", {"hours": -1}, "hours"),
               ("extend", {"tool_calls": -5}, "tool_calls"), ("extend", {"hours": float("inf")}, "hours"),
               ("extend", {"hours": 1e308}, "hours"), ("extend", {"hours": 700}, "at most 720"),
               ("extend", {"tool_calls": 999_999}, "at most 1000000"),
               ("extend", [1, 2], "extend"), ("hint", "   ", "empty hint"), ("hint", 5, "hint"),
               ("hint", "x" * 9000, "hint"), ("stop", {"why": 1}, "stop")]
        for name, payload, says in bad:
            with pytest.raises(WorkflowUpdateFailedError) as info:
                await handle.execute_update(name, payload)
            msg = str(info.value.cause)
            assert says in msg and "\n" not in msg, (name, payload, msg)
        after = await handle.query("status", result_type=RunStatus)
        assert after.phase in ("starting", "running") and after.stop_reason is None
        assert (after.hours_budget, after.tool_calls_budget) == (before.hours_budget, before.tool_calls_budget)
        # hints: bounded in size each, and in number and size all together (input and updates)
        for i in range(3):
            await handle.execute_update("hint", f"{i}" + "h" * 7998)
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await handle.execute_update("hint", "h" * 7999)
        msg = str(info.value.cause)
        assert "hint" in msg and "at most 32000" in msg and "\n" not in msg, msg
        await handle.execute_update("hint", "a short one still fits")
        ext = await handle.execute_update("extend", {"hours": 1, "tool_calls": 10}, result_type=RunStatus)
        assert ext.tool_calls_budget == before.tool_calls_budget + 10 and ext.hours_budget == before.hours_budget + 1
        assert (await handle.describe()).status.name == "RUNNING"
        await handle.terminate("test over")


def test_a_bad_suite_input_fails_the_suite_at_once(client, task_queues, tmp_path):
    asyncio.run(_bad_suite(client, task_queues, tmp_path))


async def _bad_suite(client, task_queues, tmp_path):
    tq, gq = task_queues
    bad = [({"runs": [{"problem": "mla_decode", "kernel": "/some/secret.env"}]}, "runs.0.kernel"),
           ({"runs": []}, "runs"), ({"runs": [GOOD], "parallel": 1000}, "parallel"), (7, "input"),
           # a run's own fields: each child would start from a state (a best, its verdict) nobody judged
           ({"runs": [GOOD, {**GOOD, "carry": FORGED_CARRY}]}, "runs.1.carry"),
           ({"runs": [{**GOOD, "agent": {"index": 1, "of": 2}}]}, "runs.0.agent"),
           ({"runs": [GOOD], "paralel": 2}, "paralel")]  # a misspelled field, refused
    async with workers(client, tq, gq, tmp_path / "artifacts", gpu=False):
        for raw, field in bad:
            handle = await client.start_workflow(names.SUITE_WORKFLOW_TYPE, raw, id=f"bad-suite-{uuid.uuid4().hex[:8]}",
                                                 task_queue=tq)
            with pytest.raises(WorkflowFailureError) as info:
                await asyncio.wait_for(handle.result(), 30)
            cause = info.value.cause
            assert isinstance(cause, ApplicationError) and cause.non_retryable and cause.type == "BadSuiteSpec", cause
            assert field in cause.message and "\n" not in cause.message, cause.message


def test_a_forged_fault_signal_does_not_outlive_the_run(client, task_queues, tmp_path):
    asyncio.run(_forged_fault(client, task_queues, tmp_path))


async def _forged_fault(client, task_queues, tmp_path):
    """Anyone who can reach the server can signal a run: a malformed or oversized fault is dropped, a
    well-formed one about an activity that is not failing shows while the run goes on, and clears when
    the run ends."""
    tq, gq = task_queues
    spec = {**GOOD, "budgets": {"max_tool_calls": 1}, "gpu_task_queue": gq}
    forged = {"activity": names.PROFILE_KERNEL, "attempt": 3, "message": "forged: the GPU is down",
              "since": datetime.now(timezone.utc).isoformat()}
    async with workers(client, tq, gq, tmp_path / "artifacts", gpu=False):
        # no evaluation worker yet: the run waits on its first profile, RUNNING
        handle = await client.start_workflow(names.WORKFLOW_TYPE, spec, id=f"fault-{uuid.uuid4().hex[:10]}",
                                             task_queue=tq)
        for raw in ({**forged, "activity": "rm -rf /"}, {**forged, "attempt": 10**12}, {**forged, "message": "x" * 5000},
                    {"activity": names.AGENT_TURN}, "junk", [1, 2],
                    # an activity a tuner run does not use; a `since` outside the run's lifetime
                    {**forged, "activity": names.AGENT_TURN}, {**forged, "since": "0001-01-01T00:00:00Z"},
                    {**forged, "since": "9999-12-31T23:59:59Z"}, {**forged, "since": "2024-01-01T00:00:00"}):
            await handle.signal(names.FAULT_SIGNAL, raw)
        await asyncio.sleep(2.0)
        assert (await handle.query("status", result_type=RunStatus)).fault is None
        await handle.signal(names.FAULT_SIGNAL, forged)
        deadline = time.monotonic() + 60
        while (status := await handle.query("status", result_type=RunStatus)).fault is None:
            assert time.monotonic() < deadline, "the well-formed fault never showed"
            await asyncio.sleep(0.5)
        assert status.fault.message == forged["message"]
        # each distinct `since` is a new streak; the notebook lines they add are bounded
        for i in range(30):
            await handle.signal(names.FAULT_SIGNAL, {**forged, "message": f"forged {i}",
                                                     "since": datetime.now(timezone.utc).isoformat()})
        deadline = time.monotonic() + 60
        while (status := await handle.query("status", result_type=RunStatus)).fault.message != "forged 29":
            assert time.monotonic() < deadline, "the last fault never showed"
            await asyncio.sleep(0.5)
        assert sum("failing: forged" in line for line in status.notebook) <= FAULT_LINES
        async with workers(client, tq, gq, tmp_path / "artifacts", control=False):
            await asyncio.wait_for(handle.result(), 300)
        after = await handle.query("status", result_type=RunStatus)
    assert after.phase == "finished" and after.fault is None


def _info(workflow_id="run-1", continued_run_id=None, cron_schedule=None, attempt=1, parent=None):
    """What check_origin reads of workflow.info(), crafted."""
    return SimpleNamespace(workflow_id=workflow_id, continued_run_id=continued_run_id, cron_schedule=cron_schedule,
                           attempt=attempt, parent=None if parent is None else SimpleNamespace(workflow_id=parent))


def test_carry_and_agent_only_from_the_runs_own_continue_as_new_or_its_parent_run():
    """`carry` only on a run's own continue-as-new (or an agent its run started with the state so far):
    never on a first run, a suite's child, a cron run or a retry, whose continued_run_id is set too but
    whose input is the one first given; `agent` only on a child whose id its parent's names."""
    carry = RunSpec.model_validate({**GOOD, "carry": FORGED_CARRY})
    assert isinstance(carry.carry, RunState)
    refused = {
        "first run": _info(),
        "suite's child": _info("suite/0-mla_decode", parent="suite"),
        "cron run": _info(continued_run_id="r0", cron_schedule="* * * * *"),
        "retry": _info(continued_run_id="r0", attempt=2),
        "cron child": _info("suite/0-mla_decode", continued_run_id="r0", cron_schedule="@every 1m", parent="suite"),
    }
    for what, info in refused.items():
        line = origin_refusal(carry, info)
        assert line is not None and line.startswith("carry:") and "\n" not in line, (what, line)
    assert origin_refusal(carry, _info(continued_run_id="r0")) is None  # its own continue-as-new
    assert origin_refusal(RunSpec.model_validate(GOOD), _info(continued_run_id="r0", cron_schedule="* * * * *")) is None

    agent = carry.model_copy(update={"agent": AgentRole(index=2, of=3)})
    assert origin_refusal(agent, _info(names.agent_id("run-1", 2), parent="run-1")) is None  # its run started it
    assert origin_refusal(agent, _info(names.agent_id("run-1", 2), continued_run_id="r0", parent="run-1")) is None
    for what, info in {"no parent": _info(names.agent_id("run-1", 2)),
                       "a suite's child": _info("suite/0-mla_decode", parent="suite"),
                       "another index": _info(names.agent_id("run-1", 1), parent="run-1"),
                       "another parent": _info(names.agent_id("run-1", 2), parent="run-2")}.items():
        line = origin_refusal(agent, info)
        assert line is not None and line.startswith("agent:"), (what, line)
    line = origin_refusal(agent, _info(names.agent_id("run-1", 2), cron_schedule="* * * * *", parent="run-1"))
    assert line is not None and line.startswith("carry:")


def test_a_cron_run_with_carry_is_refused_on_every_run(client, task_queues, tmp_path):
    asyncio.run(_cron_carry(client, task_queues, tmp_path))


async def _cron_carry(client, task_queues, tmp_path):
    """A cron workflow's next run starts with continued_run_id set and the input it was first given: a
    `carry` there is refused as on its first run, and no best is ever crowned."""
    tq, gq = task_queues
    wid = f"cron-{uuid.uuid4().hex[:10]}"
    async with workers(client, tq, gq, tmp_path / "artifacts", gpu=False):
        first = await client.start_workflow(names.WORKFLOW_TYPE, {**GOOD, "carry": FORGED_CARRY}, id=wid,
                                            task_queue=tq, cron_schedule="@every 2s")
        try:
            # each run's own history, followed from the first run to the next through its failure (the
            # latest run is mostly the next one, waiting for its tick: polling it misses the failures)
            failures: dict[str, str] = {}
            run_id = first.first_execution_run_id
            deadline = time.monotonic() + 120
            while len(failures) < 2:
                assert time.monotonic() < deadline, f"fewer than 2 cron runs failed: {failures}"
                started = failed = None
                async for event in client.get_workflow_handle(wid, run_id=run_id).fetch_history_events():
                    if event.HasField("workflow_execution_started_event_attributes"):
                        started = event.workflow_execution_started_event_attributes
                    if event.HasField("workflow_execution_failed_event_attributes"):
                        failed = event.workflow_execution_failed_event_attributes
                    assert not event.HasField("workflow_execution_completed_event_attributes")
                if failed is None:
                    await asyncio.sleep(0.5)
                    continue
                failures[run_id] = failed.failure.message
                if len(failures) > 1:
                    assert started.continued_execution_run_id  # the run the red team got through
                run_id = failed.new_execution_run_id
            for msg in failures.values():
                assert msg.startswith("bad run input: carry:") and "a cron run" in msg, msg
        finally:
            await client.get_workflow_handle(wid).terminate("test over")



def _raw(data: bytes, encoding: bytes = b"json/plain") -> RawValue:
    return RawValue(Payload(metadata={"encoding": encoding}, data=data))


def test_an_input_the_converter_cannot_read_fails_the_workflow_at_once(client, task_queues, tmp_path):
    asyncio.run(_undecodable(client, task_queues, tmp_path))


async def _undecodable(client, task_queues, tmp_path):
    """JSON nested 1000 deep (past the JSON parser's limit), broken JSON, a payload of bytes: the data
    converter failed on them before the input was validated, the workflow task failed for ever and the
    run showed Running. Each fails the run, or the suite, at once, non-retryable, naming the input."""
    tq, gq = task_queues
    deep = b'{"problem": "mla_decode", "hints": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    bad = [(_raw(deep), "cannot be decoded"), (_raw(b'{"problem": '), "cannot be decoded"),
           (_raw(b"mla_decode", b"binary/plain"), "input")]
    async with workers(client, tq, gq, tmp_path / "artifacts", gpu=False):
        started = []
        for workflow_type, error in ((names.WORKFLOW_TYPE, "BadRunSpec"), (names.SUITE_WORKFLOW_TYPE, "BadSuiteSpec")):
            for raw, says in bad:
                handle = await client.start_workflow(workflow_type, raw, id=f"raw-{uuid.uuid4().hex[:10]}", task_queue=tq)
                started.append((handle, error, says))
        t0 = time.monotonic()
        for handle, error, says in started:
            with pytest.raises(WorkflowFailureError) as info:
                await asyncio.wait_for(handle.result(), 30)
            cause = info.value.cause
            assert isinstance(cause, ApplicationError) and cause.non_retryable and cause.type == error, cause
            assert "input" in cause.message and says in cause.message and "\n" not in cause.message, cause.message
        assert time.monotonic() - t0 < 30
