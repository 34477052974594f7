"""Baseline timings a worker has measured, offered to later evaluations on the same GPU.

Timing a baseline is most of an evaluation's cost when the baseline is slow to start: FLA's
`chunk_kda` autotunes its kernels in every fresh judge process, which took 86 of a KDA profile's
121 s on an H200 (kernels/problems/kda/NOTES.md, "The shipped tuned kernel against FLA"). A marathon
profiles the same shapes hundreds of times, so the worker keeps each baseline figure for `ttl_s` and
hands it to the judge with the request (EvalRequest.known_baselines); the judge reuses a matching
figure instead of timing the baseline again, and the verdict names every reused figure and its age
(ShapeResult.baselines_reused). After `ttl_s` the next evaluation times the baseline afresh, so a
long run still follows the GPU's clocks and temperature; within a window, every candidate is
compared with the same figure, which makes the tuner's ranking less noisy, not more.

The cache lives in the worker's memory only: a candidate, which runs in a sandbox process the
worker spawns, can neither read nor change it. One worker process serves one GPU, so one cache
never mixes two devices' figures."""
from __future__ import annotations

import json
import threading
import time
from typing import Callable

from kernels.evaluator.verdict import KnownBaseline, Verdict, device_label
from kernels.settings import settings



class BaselineCache:
    def __init__(self, ttl_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s  # None: MARATHON_BASELINE_TTL_S, read at each use
        self._clock = clock
        self._lock = threading.Lock()  # a CPU worker may run several evaluations at once
        # (problem, device, gpu, shape, name, reps) -> (timing, measured at)
        self._entries: dict[tuple, tuple] = {}

    @property
    def ttl_s(self) -> float:
        return settings().baseline_ttl_s if self._ttl_s is None else self._ttl_s

    @staticmethod
    def _key(problem: str, device: str, gpu: str, shape: dict, name: str, reps: int) -> tuple:
        return problem, device, gpu, json.dumps(shape, sort_keys=True), name, reps

    def known(self, problem: str, device: str) -> list[KnownBaseline]:
        """The fresh figures for a problem on this worker's device (any shape; the judge matches)."""
        if self.ttl_s <= 0:
            return []
        now = self._clock()
        out = []
        with self._lock:
            for key, (timing, at) in list(self._entries.items()):
                if now - at > self.ttl_s:
                    del self._entries[key]
                elif key[0] == problem and key[1] == device:
                    out.append(KnownBaseline(shape=json.loads(key[3]), name=key[4], timing=timing, gpu=key[2],
                                             reps=key[5], age_s=round(now - at, 1)))
        return out

    def learn(self, problem: str, device: str, verdict: Verdict) -> int:
        """Keep the figures this verdict measured itself (not the ones it reused, which would
        otherwise never age out). Returns how many were kept."""
        if self.ttl_s <= 0 or verdict.mode != "full":
            return 0
        gpu = device_label(verdict.gpu)
        now = self._clock()
        kept = 0
        with self._lock:
            for r in verdict.shapes:
                for name, timing in r.baseline_timings.items():
                    if name in r.baselines_reused:
                        continue
                    self._entries[self._key(problem, device, gpu, r.shape, name, timing.calls)] = (timing, now)
                    kept += 1
        return kept
