"""After a run, the best kernel is tested on the problem's sweep shapes by a GPU worker, and the report
and the notebook say what came of it. CI has no GPU, so the GPU queue here is served by a stand-in that
runs the real evaluator on the CPU and labels its verdicts "cuda", and answers the sweep test itself
(the sweep's shapes are GPU-sized) with a wrong answer."""
from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from activities import evaluation
from activities.artifacts import ArtifactStore
from marathon_support import queues, stand_in_activity, start, workers
from workflows import names
from workflows.models import Budgets, EvalInput, EvalResult, EvalSettings, RunSpec, RunStatus

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


class GpuStandIn:
    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self.sweep_calls: list[EvalInput] = []
        self.last: EvalResult | None = None  # one evaluation at a time (max_concurrent_activities=1)

    def evaluate(self, inp: EvalInput) -> EvalResult:
        if inp.settings.shapes == "sweep":
            self.sweep_calls.append(inp)
            wrong = self.last.verdict.model_copy(update={"status": "incorrect", "mode": "test",
                                                         "reason": "wrong answer at B=1,S=63 (stand-in)"})
            return EvalResult(text="incorrect", verdict=wrong, digest=evaluation.digest(inp.tool, wrong, None))
        # heartbeats as the real worker's evaluations do: a busy machine's evaluation outlasts the timeout
        res = evaluation.run_eval(inp, self.store, heartbeat=activity.heartbeat, cache=None)
        self.last = res.model_copy(update={"verdict": res.verdict.model_copy(update={"device": "cuda"})})
        return self.last

    def activities(self) -> list:
        return [stand_in_activity(n, self.evaluate) for n in (names.COMPILE_KERNEL, names.TEST_KERNEL,
                                                              names.PROFILE_KERNEL)]


def test_the_best_is_tested_on_the_sweep(client, tmp_path):
    asyncio.run(_sweep(client, tmp_path))  # two runs, each on task queues of its own


async def _run(client: Client, tmp_path: Path, sweep_best: bool):
    tq, gq = queues()
    stand_in = GpuStandIn(ArtifactStore(tmp_path / "gpu"))
    # 3 tool calls: the start's profile, then one configuration (a write and a profile)
    spec = RunSpec(problem="mla_decode", budgets=Budgets(max_tool_calls=3),
                   eval=EvalSettings(device="cpu", sweep_best=sweep_best), gpu_task_queue=gq)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        async with workers(client, tq, gq, tmp_path / "control", gpu=False):
            gpu = Worker(client, task_queue=gq, activities=stand_in.activities(), activity_executor=ex,
                         max_concurrent_activities=1)
            async with gpu:
                handle = await start(client, spec, tq)
                report = await handle.result()
                status = await handle.query("status", result_type=RunStatus)
    return report, status, stand_in


async def _sweep(client, tmp_path):
    report, status, stand_in = await _run(client, tmp_path / "on", sweep_best=True)
    assert report.best is not None and report.best.verdict.device == "cuda"
    [call] = stand_in.sweep_calls  # once, after the run, of the best
    assert call.tool == names.TEST_KERNEL and call.attempt == report.best.attempt
    assert call.source.sha256 == report.best.sha256
    assert call.settings.baselines is False and call.settings.ncu is False and call.settings.shape_list == []
    assert report.best_sweep is not None and report.best_sweep.status == "incorrect"
    assert "S=63 (stand-in)" in report.best_sweep.reason
    assert report.tool_calls == 3  # the check is not one of the run's tool calls
    line = f"sweep check of the best (attempt {report.best.attempt}): incorrect"
    assert any(n.startswith(line) for n in status.notebook), status.notebook

    report, status, stand_in = await _run(client, tmp_path / "off", sweep_best=False)
    assert report.best is not None and stand_in.sweep_calls == [] and report.best_sweep is None
    assert not any("sweep check" in n for n in status.notebook)
