"""Nightly runs: `marathon schedule` makes a Temporal schedule that starts KernelOptimization runs."""
import asyncio
import time

import marathon
from marathon_support import ROOT
from workflows import names
from workflows.models import RunSpec


def test_schedule_create_list_trigger_delete(temporal_server, client, capsys):
    address = temporal_server.address
    args = ["--id", "nightly-mla", "--cron", "0 22 * * *", "--problem", "mla_decode", "--device", "cpu",
            "--hours", "8", "--max-tool-calls", "300", "--address", address]
    assert marathon.main(["schedule", "create", *args]) == 0
    assert "created schedule nightly-mla" in capsys.readouterr().out
    assert marathon.main(["schedule", "create", *args[:-2], "--hours", "6", "--address", address]) == 0
    assert "replaced schedule nightly-mla" in capsys.readouterr().out

    async def inspect():
        handle = client.get_schedule_handle("nightly-mla")
        desc = await handle.describe()
        action = desc.schedule.action
        # a described schedule holds its workflow arguments as raw payloads
        spec = (await client.data_converter.decode(action.args, [RunSpec]))[0]
        assert action.workflow == names.WORKFLOW_TYPE and action.task_queue == names.TASK_QUEUE
        nxt = desc.info.next_action_times  # the server keeps the cron as calendars: check when it fires
        assert nxt and all((t.hour, t.minute) == (22, 0) for t in nxt)
        assert spec.problem == "mla_decode" and spec.budgets.hours == 6 and spec.budgets.max_tool_calls == 300
        await handle.trigger()  # a run now, as the night would start it
        deadline = time.monotonic() + 30
        started = []
        while time.monotonic() < deadline and not started:
            started = [w async for w in client.list_workflows("WorkflowId STARTS_WITH 'nightly-mla'")]
            await asyncio.sleep(0.5)
        assert started and started[0].workflow_type == names.WORKFLOW_TYPE
        for w in started:
            await client.get_workflow_handle(w.id, run_id=w.run_id).terminate("test over")

    asyncio.run(inspect())
    assert marathon.main(["schedule", "list", "--address", address]) == 0
    assert "nightly-mla" in capsys.readouterr().out
    assert marathon.main(["schedule", "delete", "--id", "nightly-mla", "--address", address]) == 0
    assert marathon.main(["schedule", "create", "--id", "x", "--problem", "mla_decode", "--shape", "Q=1",
                          "--address", address]) == 2


def test_schedule_a_suite_and_a_file_problem_carry_their_sources(temporal_server, client, tmp_path, capsys):
    """The schedule's input holds each problem's source: editing the file later changes no night's run."""
    import shutil

    from workflows.suite import SuiteSpec
    examples = ROOT / "docs" / "examples"
    for name in ("silu_scale", "rms_norm"):
        for f in (f"{name}.py", f"{name}_kernel.py"):
            shutil.copy(examples / f, tmp_path / f)
    address = temporal_server.address
    assert marathon.main(["schedule", "create", "--id", "nightly-suite", "--problems", str(tmp_path),
                          "--hours-each", "2", "--device", "cuda", "--address", address]) == 0
    assert "a suite of 2 problems" in capsys.readouterr().out
    assert marathon.main(["schedule", "create", "--id", "nightly-file", "--problem", str(tmp_path / "rms_norm.py"),
                          "--kernel", str(tmp_path / "rms_norm_kernel.py"), "--device", "cuda",
                          "--address", address]) == 0
    original = (tmp_path / "rms_norm.py").read_text()
    (tmp_path / "rms_norm.py").write_text("edited after scheduling")

    async def inspect():
        action = (await client.get_schedule_handle("nightly-suite").describe()).schedule.action
        suite = (await client.data_converter.decode(action.args, [SuiteSpec]))[0]
        assert action.workflow == names.SUITE_WORKFLOW_TYPE
        assert [r.problem for r in suite.runs] == ["rms_norm", "silu_scale"]
        assert all(r.budgets.hours == 2 and r.problem_source for r in suite.runs)
        action = (await client.get_schedule_handle("nightly-file").describe()).schedule.action
        spec = (await client.data_converter.decode(action.args, [RunSpec]))[0]
        assert action.workflow == names.WORKFLOW_TYPE and spec.problem_source == original
        for sid in ("nightly-suite", "nightly-file"):
            await client.get_schedule_handle(sid).delete()

    asyncio.run(inspect())

