"""Workers for kernel-marathon: the control queue and the evaluation queue, served from this process.

    python worker.py [--address HOST:PORT] [--queues marathon,marathon-gpu] [--artifacts DIR] [--gpus auto]

Task queues:
  marathon      the KernelOptimization workflow, the model turn, compaction and the bookkeeping tools;
  marathon-gpu  compile_kernel, test_kernel, profile_kernel: one evaluation at a time per worker.
On a host with GPUs, serving marathon-gpu starts one child worker process per GPU
(CUDA_VISIBLE_DEVICES=i, max_concurrent_activities=1; serving/gpus.py); a child that dies is started again.
The Temporal dev server that `marathon dev` / `marathon run` start is serving/dev_server.py.
The model's API key is read from this process's environment by the model activity, nowhere else."""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import signal
import socket
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.service import TLSConfig
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from activities.artifacts import ArtifactStore
from activities.compaction import compact
from activities.registry import MarathonActivities
from kernels.evaluator.confinement import make_non_dumpable, remove_stale_scratch
from kernels.evaluator.evaluate import JUDGES
from kernels.settings import exit_on_bad_settings, settings
from serving.gpus import CHILD_ENV, GpuWorkers, visible_gpus
from workflows import names
from workflows.kernel_optimization import KernelOptimization
from workflows.suite import KernelSuite


# ------------------------------------------------------------------------------ client, workers
def _tls_and_key() -> tuple[TLSConfig | bool, str | None]:
    """How to reach a Temporal server beyond loopback (docs/threat-model.md): (m)TLS from the files
    MARATHON_TEMPORAL_TLS_CA, MARATHON_TEMPORAL_TLS_CERT and MARATHON_TEMPORAL_TLS_KEY name, and an API key
    from the variable MARATHON_TEMPORAL_API_KEY_ENV names (Temporal Cloud). None of them set: plain TCP, as
    to `marathon dev` on 127.0.0.1."""
    s = settings()
    ca, cert, key = s.temporal_tls_ca, s.temporal_tls_cert, s.temporal_tls_key
    api_key_env = s.temporal_api_key_env
    api_key = os.environ.get(api_key_env) if api_key_env else None
    if not (ca or cert or key):
        return bool(api_key), api_key  # an API key travels over TLS only
    if bool(cert) != bool(key):
        raise RuntimeError("MARATHON_TEMPORAL_TLS_CERT and MARATHON_TEMPORAL_TLS_KEY go together (mTLS)")
    read = lambda p: Path(p).read_bytes() if p else None  # noqa: E731
    return TLSConfig(server_root_ca_cert=read(ca), client_cert=read(cert), client_private_key=read(key)), api_key


async def connect(address: str, namespace: str = "default") -> Client:
    tls, api_key = _tls_and_key()
    return await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter, tls=tls,
                                api_key=api_key)


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


# --------------------------------------------------------------------------------------- main
def _address(text: str) -> str:
    from cli.args import ADDRESS
    return ADDRESS(text)


def _concurrency(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= n <= 1024:
        raise argparse.ArgumentTypeError(f"{n} must be from 1 to 1024")
    return n


def _parse(argv: list[str] | None) -> argparse.Namespace:
    from cli.args import FOLDER, GPUS, NAMESPACE, TASK_QUEUE_NAME, Parser
    ap = Parser(prog="worker.py", description="kernel-marathon workers")
    ap.add_argument("--address", type=_address, default=os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"))
    ap.add_argument("--namespace", type=NAMESPACE, default=os.environ.get("TEMPORAL_NAMESPACE", "default"))
    ap.add_argument("--queues", default=f"{names.TASK_QUEUE},{names.GPU_TASK_QUEUE}",
                    help="which queues to serve: marathon, marathon-gpu or both (comma-separated)")
    ap.add_argument("--task-queue", type=TASK_QUEUE_NAME, default=names.TASK_QUEUE,
                    help="the name of the control queue")
    ap.add_argument("--gpu-task-queue", type=TASK_QUEUE_NAME, default=names.GPU_TASK_QUEUE,
                    help="the name of the evaluation queue")
    ap.add_argument("--artifacts", type=FOLDER, default=None, help="artifact store directory (default: $MARATHON_ARTIFACTS or "
                                                       "~/.local/state/kernel-marathon/artifacts)")
    ap.add_argument("--gpus", type=GPUS, default="auto", help="auto: one evaluation worker process per visible GPU; none: "
                                                   "evaluate in this process; or a list like 0,1")
    ap.add_argument("--max-concurrent", type=_concurrency, default=16, help="concurrent control activities")
    return ap.parse_args(argv)


async def _serve(args: argparse.Namespace, control: bool, gpu: bool) -> None:
    client = await connect(args.address, args.namespace)
    if gpu:  # a judge started ahead of each evaluation (MARATHON_WARM_JUDGES=0: started on demand)
        JUDGES.keep_warm(1 if settings().warm_judges else 0)
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


def _gpu_child_command(args: argparse.Namespace) -> list[str]:
    """This script again, serving the evaluation queue on the one GPU its environment shows it."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--address", args.address, "--namespace", args.namespace,
           "--queues", names.GPU_TASK_QUEUE, "--gpu-task-queue", args.gpu_task_queue, "--gpus", "none"]
    return cmd + (["--artifacts", args.artifacts] if args.artifacts else [])


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    exit_on_bad_settings("worker.py")
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
    children = GpuWorkers(_gpu_child_command(args), gpus, who=f"worker {os.getpid()}").start()
    try:
        if control:
            asyncio.run(_serve(args, control, False))
        else:
            signal.signal(signal.SIGTERM, lambda *_: children.stopping.set())
            try:
                while not children.stopping.wait(1.0):
                    pass
            except KeyboardInterrupt:
                pass
    finally:
        children.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
