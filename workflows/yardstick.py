"""Which kernel is better: the one yardstick of the workflow, the tuner and the activities. Higher
speedup against the strongest baseline wins (baselines timed in the same evaluation absorb the drift of
the machine); without baselines, lower latency (the geometric mean over the shapes). Pure."""
from __future__ import annotations

import math
from typing import Any


def geomean_latency(verdict: Any) -> float | None:
    """The geometric mean of a verdict's per-shape latencies (us), rounded as digests keep it."""
    lat = [r.latency_us for r in verdict.shapes if r.latency_us] if verdict is not None else []
    return round(math.exp(sum(math.log(x) for x in lat) / len(lat)), 3) if lat else None


def beats(speedup: float | None, latency: float | None, cur_speedup: float | None, cur_latency: float | None) -> bool:
    """Whether a kernel measured (speedup, latency) is better than the current one: higher speedup wins,
    or lower latency without baselines; anything measured beats nothing."""
    if speedup is not None and cur_speedup is not None:
        return speedup > cur_speedup
    if cur_speedup is None and cur_latency is None:
        return speedup is not None or latency is not None
    return cur_latency is not None and latency is not None and latency < cur_latency
