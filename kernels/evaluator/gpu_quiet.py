"""Timing only on a GPU nobody else is using: before the judge times a candidate it asks the driver
which processes hold a context on its GPU; if any is not its own (an orphaned evaluation, another
user's job) it waits for them to leave, up to a bound, then times anyway and the verdict says so.
Torch-free; the query is a plain function so the decision can be tested without a GPU."""
from __future__ import annotations

import shutil
import subprocess
import time
from typing import Callable

from kernels.settings import settings

POLL_S = 2.0

# A query: the pids with a compute context on our GPU, or None when that cannot be known (no nvidia-smi).
Query = Callable[[], "set[int] | None"]


def nvidia_smi_query(gpu_uuid: str | None) -> Query:
    """Pids with a compute context on the GPU with this UUID (every GPU when None), via nvidia-smi."""
    def query() -> set[int] | None:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return None
        try:
            out = subprocess.run([smi, "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode != 0:
            return None
        pids = set()
        for line in out.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 2 or not parts[1].isdigit():
                continue
            if gpu_uuid is None or parts[0].lower() == gpu_uuid.lower():
                pids.add(int(parts[1]))
        return pids
    return query


def wait_for_quiet_gpu(query: Query, ours: Callable[[], set[int]], *, bound_s: float | None = None,
                       poll_s: float = POLL_S, clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> str:
    """Waits until no process but ours (the judge and its sandbox) uses the GPU, at most bound_s.
    Returns "" when the GPU was free from the start (or nobody can tell); otherwise a sentence for the
    verdict: whom it waited for, how long, and whether the timing went ahead beside them. bound_s
    defaults to MARATHON_GPU_QUIET_WAIT_S."""
    bound_s = settings().gpu_quiet_wait_s if bound_s is None else bound_s
    t0 = clock()
    seen: set[int] = set()
    while True:
        pids = query()
        if pids is None:
            return ""
        others = _others(pids, ours())
        waited = clock() - t0
        if not others:
            if not seen:
                return ""
            return (f"waited {waited:.0f} s for other process(es) on this GPU (pid {_pids(seen)}) to finish "
                    "before timing")
        seen |= others
        if waited >= bound_s:
            return (f"other process(es) were using this GPU (pid {_pids(others)}); waited {waited:.0f} s, then "
                    "timed beside them: the timings may be slow")
        sleep(min(poll_s, max(bound_s - waited, 0.0)))


def _others(pids: set[int], ours: set[int]) -> set[int]:
    """The processes on the GPU that are not ours. The driver names them by the host's pids; inside a
    container with a pid namespace of its own none of them is ours by number (the judge itself holds
    a context), so there they are counted instead: each listed process beyond our own number is
    another's (and stands as a negative placeholder)."""
    if not pids or pids & ours:
        return pids - ours
    return set(range(-(len(pids) - len(ours)), 0))


def _pids(pids: set[int]) -> str:
    unnamed = sum(1 for p in pids if p < 0)
    named = sorted(p for p in pids if p > 0)
    text = ", ".join(map(str, named[:8])) + (" ..." if len(named) > 8 else "")
    if unnamed:
        text = ", ".join(filter(None, [text, f"{unnamed} unnamed: another pid namespace"]))
    return text
