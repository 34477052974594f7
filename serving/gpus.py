"""One evaluation worker process per GPU: which GPUs the host offers, and the children that serve them
(CUDA_VISIBLE_DEVICES=i each; a child that exits is started again)."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading

CHILD_ENV = "MARATHON_GPU_CHILD"  # set in a child's environment: it serves its one GPU, starts none


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


class GpuWorkers:
    """`command` (a worker serving the evaluation queue) once per GPU of `gpus`, watched: one that exits
    is started again until stop(). `who` begins the lines it prints."""

    def __init__(self, command: list[str], gpus: list[str], who: str) -> None:
        self.command, self.gpus, self.who = command, gpus, who
        self.procs: list[subprocess.Popen] = []
        self.stopping = threading.Event()

    def _spawn(self, gpu: str) -> subprocess.Popen:
        return subprocess.Popen(self.command, env=dict(os.environ, CUDA_VISIBLE_DEVICES=gpu, **{CHILD_ENV: "1"}))

    def start(self) -> "GpuWorkers":
        self.procs = [self._spawn(g) for g in self.gpus]
        print(f"{self.who}: {len(self.gpus)} evaluation worker(s), one per GPU ({', '.join(self.gpus)})", flush=True)
        threading.Thread(target=self._supervise, daemon=True).start()
        return self

    def _supervise(self) -> None:
        while not self.stopping.wait(2.0):
            for i, p in enumerate(self.procs):
                if p.poll() is not None:
                    print(f"{self.who}: evaluation worker on GPU {self.gpus[i]} exited ({p.returncode}); "
                          f"starting it again", flush=True)
                    self.procs[i] = self._spawn(self.gpus[i])

    def stop(self) -> None:
        self.stopping.set()
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
