"""Helpers for the workflow tests: workers on a uuid task queue per test, starting a run, and reading back
the histories of every run segment (worker processes to SIGKILL: serving/chaos.py)."""
from __future__ import annotations

import asyncio
import contextvars
import importlib.util
import inspect
import sys
import threading
import typing
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from temporalio import activity
from temporalio.client import Client, WorkflowHandle

import worker
from activities.artifacts import ArtifactStore
from kernels.problems.tunables import with_config
from workflows import names
from workflows.models import Budgets, EvalSettings, ModelSettings, RunReport, RunSpec

ROOT = Path(__file__).resolve().parent.parent
STARTER_MLA = (ROOT / "kernels" / "problems" / "mla_decode" / "starter.py").read_text()


def load_test_module(name: str):
    """Another test module's shared values (honest candidates, problem files, helpers), by its basename,
    wherever under tests/ it lives: the copy pytest collected if there is one, else loaded once here."""
    if name not in sys.modules:
        path = next((ROOT / "tests").rglob(f"{name}.py"))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def mla_variant(**config: Any) -> str:
    """The MLA starter with another CONFIG: a real Triton kernel, correct."""
    return with_config(STARTER_MLA, {"BLOCK_S": 16, "num_warps": 4, **config})


def mla_wrong() -> str:
    """The MLA starter with its output doubled: compiles, runs, gives the wrong answer."""
    out = STARTER_MLA.replace("out = acc / l_run", "out = 2.0 * acc / l_run")
    assert out != STARTER_MLA
    return out


def fake_model_spec(base_url: str, gpu_queue: str, budgets: Budgets, **settings: Any) -> RunSpec:
    """A run on MLA decode whose model is the fake server at `base_url`, judged on the CPU."""
    return RunSpec(problem="mla_decode", model=ModelSettings(model="fake", base_url=base_url, api_key_env=""),
                   budgets=budgets, eval=EvalSettings(device="cpu"), gpu_task_queue=gpu_queue, **settings)


def queues() -> tuple[str, str]:
    tq = f"test-{uuid.uuid4().hex[:10]}"
    return tq, tq + "-gpu"


@asynccontextmanager
async def workers(server: Client | str, task_queue: str, gpu_task_queue: str, store_dir: Path,
                  control: bool = True, gpu: bool = True) -> AsyncIterator[Client]:
    """The real workers on this test's queues, for the length of the block, on a connection of their own
    to `server` (the session's client, conftest's `client`, or an address): the SDK allows one worker per
    task queue on a client, and a test may run two sets on its queues, as two hosts would."""
    address = server.service_client.config.target_host if isinstance(server, Client) else server
    client = await worker.connect(address)
    ws = worker.build_workers(client, control=control, gpu=gpu, task_queue=task_queue, gpu_task_queue=gpu_task_queue,
                              store=ArtifactStore(store_dir))
    task = asyncio.create_task(ws.run())
    try:
        yield client
    finally:
        await ws.shutdown()
        try:
            await asyncio.wait_for(task, 30)
        except (asyncio.TimeoutError, Exception):
            pass


def stand_in_activity(name: str, fn: Callable[[Any], Any], every_s: float = 1.0):
    """A synchronous activity `name` that runs `fn` (its one argument and its result typed, as the data
    converter needs) and heartbeats every `every_s` while it does, as the real workers' activities do: on a
    busy machine a stand-in's call can outlast any heartbeat timeout."""
    hints = typing.get_type_hints(fn)
    arg = next(iter(inspect.signature(fn).parameters))

    def run(inp):
        done = threading.Event()
        context = contextvars.copy_context()  # the activity's context, for the ticking thread

        def tick() -> None:
            while not done.wait(every_s):
                context.run(activity.heartbeat)
        activity.heartbeat()
        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            return fn(inp)
        finally:
            done.set()
            ticker.join()
    run.__annotations__ = {"inp": hints[arg], "return": hints["return"]}
    return activity.defn(name=name)(run)


async def start(client: Client, spec: RunSpec, task_queue: str, workflow_id: str | None = None) -> WorkflowHandle:
    return await client.start_workflow(names.WORKFLOW_TYPE, spec, id=workflow_id or f"wf-{uuid.uuid4().hex[:10]}",
                                       task_queue=task_queue, result_type=RunReport)


async def segments(client: Client, workflow_id: str, first_run_id: str) -> list[dict]:
    """Every run of a workflow id, following continue-as-new: run_id, events, history bytes."""
    out = []
    run_id: str | None = first_run_id
    while run_id:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        desc = await handle.describe()
        history = await handle.fetch_history()
        info = desc.raw_description.workflow_execution_info
        nxt = None
        last = history.events[-1]
        if last.HasField("workflow_execution_continued_as_new_event_attributes"):
            nxt = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        out.append({"run_id": run_id, "events": len(history.events), "bytes": info.history_size_bytes,
                    "history": history})
        run_id = nxt
    return out
