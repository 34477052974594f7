"""Fault drills: a small run against a real Temporal dev server, real worker processes and a scripted
model endpoint (serving/scripted_model.py), with one fault injected. tests/serving/test_chaos.py asserts on
the outcomes; bench/chaos_restart.py times the restarts.

Every case runs the same small LLM run (the MLA starter profiled as attempt 0; turn 1 writes a variant,
turn 2 tests it, turn 3 notes; the tool-call budget is 4) with one fault injected:
  workflow-worker   SIGKILL the worker serving the workflow and the model while a model turn is in flight
  eval-worker       SIGKILL the evaluation worker in the middle of test_kernel
  server            SIGKILL the Temporal server in the middle of test_kernel
  all               SIGKILL the server and both workers in the middle of test_kernel
  state-dir-move    SIGKILL everything mid-test_kernel, move the state directory, start again from the new path
  model-down        the model endpoint refuses connections after turn 2, for OUTAGE_S from the first refusal
  model-401         the model endpoint answers 401 at turn 3
  model-400         the model endpoint answers 400 (context length) from turn 3 on
  store-full        the artifact store fills up (a quota) before test_kernel stores its verdict, then is freed
  store-corrupt     attempt 1's source is damaged on disk before test_kernel reads it; turn 3 writes it again
Each process is a child of the caller; every wait is bounded. Also here: worker.py as a process of its
own and the wait for an activity to be running, which the crash tests use as well."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from temporalio.client import WorkflowHandle

import worker as worker_module
from activities.artifacts import ArtifactStore, sha256_text
from kernels.problems.spec import get_problem, resolve_kernel
from kernels.problems.tunables import with_config
from serving.dev_server import DevServer
from serving.scripted_model import FakeOpenAI, Reply, completion, error
from workflows import names
from workflows.models import Budgets, EvalSettings, ModelSettings, RunReport, RunSpec, RunStatus, ToolCallRecord

RESTART_CASES = ("workflow-worker", "eval-worker", "server", "all", "state-dir-move")
FAULT_CASES = ("model-down", "model-401", "model-400", "store-full", "store-corrupt")
CASES = RESTART_CASES + FAULT_CASES
HEARTBEAT_S = 5.0  # evaluations' heartbeat timeout here (the default, 10 s, leaves a loaded GPU host more slack)
OUTAGE_S = 20.0
KEY_ENV, KEY = "CHAOS_MODEL_KEY", "sk-chaos-0123456789abcdef"
QUOTA = 50_000_000
CONTEXT_400 = ("This model's maximum context length is 8192 tokens. However, your messages resulted in "
               "9120 tokens. Please reduce the length of the messages.")
# the MLA starter with another CONFIG: a real Triton kernel, correct
VARIANT = with_config(resolve_kernel(get_problem("mla_decode"), "starter")[1], {"BLOCK_S": 32, "num_warps": 4})


def spawn_worker(address: str, tq: str, gq: str, artifacts: Path, *, queue: str | None = None,
                 env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """worker.py as a process of its own (so it can be SIGKILLed): both queues, or only `queue`
    (names.TASK_QUEUE: the workflow, the model and the tools; names.GPU_TASK_QUEUE: evaluations)."""
    cmd = [sys.executable, str(Path(worker_module.__file__).resolve()), "--address", address, "--task-queue", tq,
           "--gpu-task-queue", gq, "--gpus", "none", "--artifacts", str(artifacts)]
    if queue:
        cmd += ["--queues", queue]
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    finally:
        if log:
            out.close()


def stop_process(p: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 20 s."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def wait_running(handle: WorkflowHandle, activity: str, deadline_s: float = 120.0) -> Any:
    """Wait until an attempt of `activity` is running on a worker (the workflow may not exist yet); returns
    its pending-activity description (e.g. `last_worker_identity`: the worker's "pid@host")."""
    from temporalio.api.enums.v1 import PendingActivityState

    deadline = time.monotonic() + deadline_s
    while True:
        _before(deadline, f"{activity} never started")
        try:
            desc = await handle.describe()
            for p in desc.raw_description.pending_activities:
                if p.activity_type.name == activity and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                    return p
        except Exception:
            pass
        await asyncio.sleep(0.2)


def _before(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(what)


@dataclass
class Outcome:
    case: str
    report: RunReport
    ledger: list[ToolCallRecord]
    history_json: str  # every event, as JSON: what the Web UI can show
    notebook: str  # the notebook file in the artifact store
    restart_to_next_call_s: float | None = None  # from the restart to the next activity attempt started
    faults_seen: list[str] = field(default_factory=list)  # RunStatus.fault lines seen while it ran
    details_seen: list[str] = field(default_factory=list)  # the Web UI's current details seen while it ran
    deliveries: dict[int, int] = field(default_factory=dict)  # model requests per turn


class Cluster:
    """A dev server with its state (SQLite, artifacts) under `state`, a control worker and an evaluation
    worker, each a process that can be SIGKILLed and started again."""

    def __init__(self, state: Path, env: dict[str, str]) -> None:
        self.state, self.env = state, env
        self.port: int | None = None  # the server's first start picks it (again, if it was taken); restarts keep it
        tag = uuid.uuid4().hex[:8]
        self.tq, self.gq = f"chaos-{tag}", f"chaos-{tag}-gpu"
        self.server: DevServer | None = None
        self.control: subprocess.Popen | None = None
        self.evaluator: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def store(self) -> ArtifactStore:
        return ArtifactStore(self.state / "artifacts")

    def start_server(self) -> None:
        self.server = DevServer(port=self.port, db=self.state / "temporal.db",
                                              log=self.state / "temporal.log").start()
        self.port = self.server.port

    def _spawn(self, queue: str) -> subprocess.Popen:
        return spawn_worker(self.address, self.tq, self.gq, self.state / "artifacts", queue=queue, env=self.env,
                            log=self.state / f"worker-{queue}.log")

    def start_control(self) -> None:
        self.control = self._spawn(names.TASK_QUEUE)

    def start_evaluator(self) -> None:
        self.evaluator = self._spawn(names.GPU_TASK_QUEUE)

    def start_all(self) -> None:
        self.start_server()
        self.start_control()
        self.start_evaluator()

    def kill(self, which: str) -> None:
        proc = {"server": self.server.proc if self.server else None, "control": self.control,
                "evaluator": self.evaluator}[which]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def stop(self) -> None:
        for p in (self.control, self.evaluator):
            if p is not None:
                stop_process(p)
        if self.server is not None:
            self.server.stop()


def _spec(base_url: str, case: str, gpu_task_queue: str) -> RunSpec:
    return RunSpec(problem="mla_decode",
                   model=ModelSettings(model="fake", base_url=base_url, api_key_env=KEY_ENV, retry_initial_s=1.0,
                                       retry_max_s=4.0, request_timeout_s=60.0),
                   budgets=Budgets(max_tool_calls=6 if case == "store-corrupt" else 4),
                   eval=EvalSettings(device="cpu", heartbeat_timeout_s=HEARTBEAT_S, max_attempts=10),
                   gpu_task_queue=gpu_task_queue, inline_source_cap=200 if case == "store-corrupt" else 32768)


def _script(case: str, cluster: Cluster, fake_ref: list[FakeOpenAI], in_flight: threading.Event) -> Callable:
    turns: dict[int, list[tuple[str, Any]]] = {1: [("write_kernel", {"source": VARIANT})], 2: [("test_kernel", {})],
                                               3: [("note", {"text": "the run came through the fault"})]}
    if case == "store-corrupt":
        turns.update({3: [("write_kernel", {"source": VARIANT})], 4: [("test_kernel", {})],
                      5: [("note", {"text": "the damaged source was written again"})]})

    def script(turn: int, delivery: int, request: dict) -> Reply:
        if turn == 2 and case == "workflow-worker" and delivery == 1:
            in_flight.set()  # the test kills the worker asking this; the answer never arrives
            return Reply(delay_s=15.0, body={"error": {"message": "too late"}}, status=500)
        if turn == 2 and case == "store-corrupt" and delivery == 1:
            path = cluster.store.path(sha256_text(VARIANT))
            path.write_text(VARIANT.replace("def ", "deff ", 1))  # a bit rot: same name, other bytes
        if turn == 2 and case == "store-full" and delivery == 1:
            (cluster.state / "artifacts" / "filler.bin").write_bytes(b"\0" * QUOTA)
        if turn >= 3 and case == "model-401":
            return error(401, f"Incorrect API key provided: {KEY}. You can find your API key at the usual place.")
        if turn >= 3 and case == "model-400":
            return error(400, CONTEXT_400)
        reply = completion(f"turn {turn}", turns.get(turn, []), turn=turn)
        if turn == 2 and case == "model-down" and delivery == 1:
            reply.after = fake_ref[0].down  # back up OUTAGE_S after the run first reports the refusal
        return reply

    return script


async def _current_details(handle: WorkflowHandle) -> str:
    from temporalio.api.sdk.v1 import WorkflowMetadata
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return meta.current_details


async def _watch(client_box: list, wf_id: str, out: Outcome, stop: asyncio.Event) -> None:
    """Poll the run's status and current details (as `marathon follow` and the Web UI would) while it runs."""
    while not stop.is_set():
        try:
            handle = client_box[0].get_workflow_handle(wf_id)
            st = await asyncio.wait_for(handle.query("status", result_type=RunStatus), 5)
            if st.fault is not None:
                line = st.fault.line(datetime.now(timezone.utc))
                if not out.faults_seen or out.faults_seen[-1] != line:
                    out.faults_seen.append(line)
                details = await asyncio.wait_for(_current_details(handle), 5)
                if "Failing" in details:
                    out.details_seen.append(details)
        except Exception:
            pass
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except asyncio.TimeoutError:
            pass


def _first_start_after(history_json: str, since: float) -> float | None:
    """Seconds from `since` to the first activity attempt started at or after it (history event times)."""
    for e in json.loads(history_json)["events"]:
        if "activityTaskStartedEventAttributes" in e:
            at = datetime.fromisoformat(e["eventTime"].replace("Z", "+00:00")).timestamp()
            if at >= since:
                return at - since
    return None


async def run_case(case: str, tmp: Path, timeout_s: float = 240.0) -> Outcome:
    if case not in CASES:
        raise ValueError(f"unknown case {case!r}; cases: {', '.join(CASES)}")
    state = tmp / "state-a"
    env = {KEY_ENV: KEY, "MARATHON_MODEL_KEYS": f"{KEY_ENV}=http://127.0.0.1:*"}  # the scripted endpoint
    if case == "store-full":
        env["MARATHON_ARTIFACTS_QUOTA_BYTES"] = str(QUOTA)
    cluster = Cluster(state, env)
    in_flight = threading.Event()
    fake_ref: list[FakeOpenAI] = []
    wf_id = f"chaos-{case}-{uuid.uuid4().hex[:6]}"
    restart_at: float | None = None
    try:
        with FakeOpenAI(lambda t, d, r: script(t, d, r)) as fake:
            fake_ref.append(fake)
            script = _script(case, cluster, fake_ref, in_flight)
            cluster.start_all()
            client = await worker_module.connect(cluster.address)
            client_box = [client]
            spec = _spec(fake.base_url, case, cluster.gq)
            handle = await client.start_workflow(names.WORKFLOW_TYPE, spec, id=wf_id, task_queue=cluster.tq,
                                                 result_type=RunReport)
            out = Outcome(case=case, report=None, ledger=[], history_json="", notebook="")  # type: ignore[arg-type]
            stop_watch = asyncio.Event()
            watcher = asyncio.create_task(_watch(client_box, wf_id, out, stop_watch))

            if case == "workflow-worker":
                deadline = time.monotonic() + 120
                while not in_flight.is_set():
                    _before(deadline, "turn 2 was never asked")
                    await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)
                cluster.kill("control")
                restart_at = time.time()
                cluster.start_control()
            elif case in ("eval-worker", "server", "all", "state-dir-move"):
                await wait_running(handle, names.TEST_KERNEL)
                await asyncio.sleep(1.0)  # well inside the evaluation
                victims = {"eval-worker": ["evaluator"], "server": ["server"]}.get(
                    case, ["server", "control", "evaluator"])
                for v in victims:
                    cluster.kill(v)
                if case == "state-dir-move":
                    moved = tmp / "state-b"
                    shutil.move(str(cluster.state), str(moved))
                    cluster.state = moved
                restart_at = time.time()
                if "server" in victims:
                    cluster.start_server()
                    client_box[0] = client = await worker_module.connect(cluster.address)
                if "control" in victims:
                    cluster.start_control()
                if "evaluator" in victims:
                    cluster.start_evaluator()
                handle = client.get_workflow_handle(wf_id, result_type=RunReport)
            elif case == "model-down":
                # the outage is timed from the first refused turn, not from the turn before it: the
                # evaluation between them takes as long as the machine's load makes it
                deadline = time.monotonic() + 120
                while not any("connection refused" in f for f in out.faults_seen):
                    _before(deadline, f"the outage was never reported: {out.faults_seen}")
                    await asyncio.sleep(0.3)
                await asyncio.sleep(OUTAGE_S)
                fake.up()
            elif case == "store-full":
                deadline = time.monotonic() + 120
                while not any("full" in f for f in out.faults_seen):
                    _before(deadline, f"the full store was never reported: {out.faults_seen}")
                    await asyncio.sleep(0.3)
                (cluster.state / "artifacts" / "filler.bin").unlink()

            report = await asyncio.wait_for(handle.result(), timeout_s)
            stop_watch.set()
            await watcher
            out.report = report
            out.ledger = await handle.query("ledger", result_type=list[ToolCallRecord])
            out.history_json = (await handle.fetch_history()).to_json()
            nb = cluster.store.notebook_path(wf_id)
            out.notebook = nb.read_text() if nb.exists() else ""
            out.deliveries = dict(fake.deliveries)
            if restart_at is not None:
                out.restart_to_next_call_s = _first_start_after(out.history_json, restart_at)
            return out
    finally:
        cluster.stop()
