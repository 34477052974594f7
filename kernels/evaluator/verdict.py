"""The evaluator's answer. One home for these models: the CLI, the activities and the workflow
import them from here. `Verdict.model_dump_json()` is exactly `marathon eval --json`."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Status = Literal["ok", "rejected", "compile_error", "incorrect", "timeout", "crashed"]
STATUSES: tuple[str, ...] = ("ok", "rejected", "compile_error", "incorrect", "timeout", "crashed")
Mode = Literal["compile", "test", "full"]  # import+first call / + correctness / + timing


class Gpu(BaseModel):
    name: str
    driver: str | None = None


def device_label(gpu: Gpu | None) -> str:
    """The GPU's name, or "cpu": what a reused baseline figure must match (KnownBaseline.gpu)."""
    return gpu.name if gpu else "cpu"


class Timing(BaseModel):
    """Microseconds over repeated calls, L2 flushed before each on CUDA."""
    median_us: float
    p10_us: float
    p90_us: float
    calls: int
    graph_median_us: float | None = None  # the same call captured in a CUDA graph and replayed
    graph_error: str | None = None
    # one call by the wall clock between two full device synchronisations: the host's launch cost
    # included (the event times above hold the device's own work only)
    sync_wall_us: float | None = None
    # the quickest of a few calls timed by the judge's own clock, across the process boundary (the round
    # trip included): a bound on the figures above that nothing in the candidate's process decides
    judge_clock_us: float | None = None
    # what perturbing one call's inputs takes (the judge's clock holds it), timed by the judge itself on
    # a tensor of that input's size and dtype; allowed for when the two are compared
    judge_perturb_us: float | None = None


class KnownBaseline(BaseModel):
    """A baseline's timing from an earlier evaluation on the same GPU, offered to the judge so it need
    not time the baseline again (kernels/evaluator/baseline_cache.py). Only the worker, never a candidate, writes
    these: they travel in the request the judge reads before any candidate code starts."""
    shape: dict[str, int]
    name: str
    timing: Timing
    gpu: str  # device_label() of where it was measured: reused only on the same kind of device
    reps: int  # timed calls behind the figure: reused only by a judge timing the same number
    age_s: float  # how long ago it was measured, when offered


class ShapeResult(BaseModel):
    shape: dict[str, int]
    correct: bool
    seeds: int = 0
    max_abs_err: float | None = None
    rel_err: float | None = None
    latency_us: float | None = None  # median
    timing: Timing | None = None
    baselines: dict[str, float] = Field(default_factory=dict)  # name -> median us
    baseline_timings: dict[str, Timing] = Field(default_factory=dict)
    speedup: dict[str, float] = Field(default_factory=dict)  # name -> baseline us / candidate us
    # baselines not timed in this evaluation but reused from an earlier one on the same GPU: name ->
    # the figure's age in seconds (the worker's baseline cache; absent: timed here, in this run)
    baselines_reused: dict[str, float] = Field(default_factory=dict)
    floor_us: float | None = None
    roofline_pct: float | None = None  # floor / latency, in percent
    note: str | None = None


class MetricResult(BaseModel):
    """A task's figure (tasks/measure.py): the candidate's, and the task's own files' measured in the
    same call, runs interleaved. A task's verdict has this instead of shapes."""
    name: str  # how it was read: wall_time, failure_rate, "METRIC <name>", "regex:..."
    unit: str = ""
    direction: Literal["lower", "higher"] = "lower"
    value: float | None = None  # the median of the samples, or the failure rate
    baseline: float | None = None
    samples: list[float] = Field(default_factory=list)
    baseline_samples: list[float] = Field(default_factory=list)
    gain: float | None = None  # > 1: better than the task's own files
    changed: list[str] = Field(default_factory=list)  # the files the candidate changes
    guard_tail: str = ""


class Verdict(BaseModel):
    status: Status
    reason: str
    problem: str
    kernel: str
    mode: Mode = "full"
    device: str
    gpu: Gpu | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    dtype: str | None = None
    timing_meaningful: bool = False
    shapes: list[ShapeResult] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)  # suspicious but not disqualifying
    kernels_launched: list[str] = Field(default_factory=list)
    log_tail: str = ""  # the end of the candidate's own stdout/stderr, for the author to read
    # correctness-only shapes drawn at random for this evaluation, so no candidate can know them
    probe_shapes: list[ShapeResult] = Field(default_factory=list)
    # the operating-system fences the candidate ran inside (kernels/evaluator/isolation.py) and which took
    sandbox: dict[str, bool | float | int | str] = Field(default_factory=dict)
    source_sha256: str = ""
    elapsed_s: float = 0.0
    # where elapsed_s went (seconds): sandbox start, reference, candidate calls, timing, baselines...
    phases_s: dict[str, float] = Field(default_factory=dict)
    # other processes found on the GPU before timing (kernels/evaluator/gpu_quiet.py): whom the judge waited for
    # and whether it timed beside them; empty when the GPU was the judge's alone (and on the CPU)
    gpu_shared: str = ""
    metric: MetricResult | None = None  # a task's figure (its shapes are empty)
    # a file problem that cannot be judged as asked (its own code failed, or a size was given below 1):
    # one line with the file's line; the verdict is then no verdict on the candidate
    problem_error: str | None = None
    # what the judge chose by itself for a file problem (small sizes for a CPU), in words
    shapes_note: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def best_speedup(self) -> float | None:
        """The smallest speedup against the strongest baseline over the shapes: the honest headline.
        A task's: how many times better than its own files."""
        if self.metric is not None:
            return self.metric.gain
        worst = [min(r.speedup.values()) for r in self.shapes if r.speedup]
        return min(worst) if worst else None
