"""One timing routine for candidates (in the sandbox) and baselines (in the judge), so both are
measured the same way: warm-up, L2 flushed before every timed call, CUDA events around the call
alone, input sets rotated so no call sees the addresses of the one before, and a CUDA-graph figure."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

FLUSH_BYTES = 256 * 2**20  # over 4x the H200's 60 MB L2


def _call_all(fn: Callable, inputs: dict):
    return fn(**inputs)


def time_cpu(fn: Callable, input_sets: list[dict], reps: int, warmup: int) -> dict:
    """Wall clock on the CPU (the Triton interpreter): labelled not meaningful by the judge."""
    for i in range(warmup):
        _call_all(fn, input_sets[i % len(input_sets)])
    times = []
    for i in range(reps):
        t0 = time.perf_counter()
        _call_all(fn, input_sets[i % len(input_sets)])
        times.append((time.perf_counter() - t0) * 1e6)
    return {"times_us": times, "graph_times_us": None, "graph_error": "no CUDA graphs on the CPU"}


def time_cuda(fn: Callable, input_sets: list[dict], reps: int, warmup: int, graph: bool = True) -> dict:
    device = torch.device("cuda")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
    for i in range(warmup):
        _call_all(fn, input_sets[i % len(input_sets)])
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    wall0 = time.perf_counter()
    for i in range(reps):
        flush.zero_()
        starts[i].record()
        _call_all(fn, input_sets[i % len(input_sets)])
        ends[i].record()
    torch.cuda.synchronize()  # the whole device: work on side streams is waited for too
    wall_s = time.perf_counter() - wall0
    times = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    result = {"times_us": times, "wall_s": wall_s, "graph_times_us": None, "graph_error": None}
    if graph:
        try:
            result["graph_times_us"] = _time_graph(fn, input_sets, reps, flush)
        except Exception as exc:  # not every callable is capturable; the eager figure stands
            result["graph_error"] = f"{type(exc).__name__}: {exc}"[:300]
            torch.cuda.synchronize()
    return result


def _time_graph(fn: Callable, input_sets: list[dict], reps: int, flush: torch.Tensor) -> list[float]:
    graphs = []
    side = torch.cuda.Stream()
    for inputs in input_sets:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up outside capture, as torch.cuda.graphs asks
            _call_all(fn, inputs)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            _call_all(fn, inputs)
        graphs.append(g)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        starts[i].record()
        graphs[i % len(graphs)].replay()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def time_fn(fn: Callable, input_sets: list[dict], device: str, reps: int, warmup: int) -> dict:
    if device == "cuda":
        return time_cuda(fn, input_sets, reps, warmup)
    return time_cpu(fn, input_sets, reps, warmup)


def summarize(times_us: list[float]) -> dict:
    """Median and the 10th/90th percentiles: the spread is reported, not hidden."""
    ordered = sorted(times_us)
    n = len(ordered)

    def pct(p: float) -> float:
        return ordered[min(n - 1, max(0, round(p * (n - 1))))]

    return {"median_us": statistics.median(ordered), "p10_us": pct(0.1), "p90_us": pct(0.9), "calls": n}
