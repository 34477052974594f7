"""The worker's baseline cache (kernels/evaluator/baseline_cache.py): figures offered to the judge are reused
only for the same shape, device and number of calls, are labelled with their age, and expire."""
import hashlib

import pytest

from activities.artifacts import ArtifactStore
from activities.evaluation import run_eval
from kernels.evaluator.baseline_cache import BaselineCache
from kernels.evaluator.evaluate import evaluate, request_for
from kernels.evaluator.verdict import KnownBaseline, ShapeResult, Timing, Verdict
from workflows.models import EvalInput, EvalSettings, SourceRef

SMOKE_A = {"B": 1, "H": 4, "S": 100}


def _timing(median: float, calls: int = 3) -> Timing:
    return Timing(median_us=median, p10_us=median, p90_us=median, calls=calls)


def _verdict(baselines: dict[str, float], reused: dict[str, float] | None = None, mode: str = "full") -> Verdict:
    r = ShapeResult(shape=SMOKE_A, correct=True, baselines=dict(baselines), baselines_reused=reused or {},
                    baseline_timings={k: _timing(v) for k, v in baselines.items()})
    return Verdict(status="ok", reason="", problem="mla_decode", kernel="k", device="cpu", shapes=[r], mode=mode)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_cache_offers_fresh_figures_and_forgets_old_ones():
    clock = Clock()
    cache = BaselineCache(ttl_s=600, clock=clock)
    assert cache.learn("mla_decode", "cpu", _verdict({"torch": 50.0})) == 1
    clock.now += 100
    [k] = cache.known("mla_decode", "cpu")
    assert (k.name, k.shape, k.gpu, k.reps, k.age_s, k.timing.median_us) == ("torch", SMOKE_A, "cpu", 3, 100.0, 50.0)
    assert cache.known("kda", "cpu") == [] and cache.known("mla_decode", "cuda") == []
    clock.now += 501
    assert cache.known("mla_decode", "cpu") == []


def test_reused_figures_are_not_learned_again_so_they_age_out():
    clock = Clock()
    cache = BaselineCache(ttl_s=600, clock=clock)
    cache.learn("mla_decode", "cpu", _verdict({"torch": 50.0}))
    clock.now += 400
    # a verdict that reused the figure must not refresh its age
    assert cache.learn("mla_decode", "cpu", _verdict({"torch": 50.0}, reused={"torch": 400.0})) == 0
    clock.now += 201
    assert cache.known("mla_decode", "cpu") == []


def test_a_zero_ttl_or_a_partial_evaluation_keeps_nothing():
    assert BaselineCache(ttl_s=0).learn("mla_decode", "cpu", _verdict({"torch": 50.0})) == 0
    assert BaselineCache().learn("mla_decode", "cpu", _verdict({"torch": 50.0}, mode="test")) == 0


@pytest.mark.slow
def test_the_judge_reuses_only_matching_figures_and_says_so():
    offered = [
        KnownBaseline(shape=SMOKE_A, name="torch", timing=_timing(123456.0), gpu="cpu", reps=3, age_s=42.0),
        # another device, or another number of calls: never reused
        KnownBaseline(shape={"B": 2, "H": 3, "S": 37}, name="torch", timing=_timing(1.0), gpu="NVIDIA H200",
                      reps=3, age_s=1.0),
        KnownBaseline(shape={"B": 2, "H": 3, "S": 37}, name="torch", timing=_timing(2.0, calls=30), gpu="cpu",
                      reps=30, age_s=1.0),
    ]
    req = request_for("mla_decode", "starter", device="cpu", probe_shapes=0).model_copy(
        update={"known_baselines": offered})
    v = evaluate(req)
    assert v.status == "ok", v.reason
    first, second = v.shapes
    assert first.baselines["torch"] == 123456.0 and first.baselines_reused == {"torch": 42.0}
    assert first.speedup["torch"] == pytest.approx(123456.0 / first.latency_us, rel=1e-3)
    assert second.baselines_reused == {} and second.baselines["torch"] not in (1.0, 2.0)
    assert second.baseline_timings["torch"].calls == 3


@pytest.mark.slow
def test_a_second_profile_on_a_cpu_times_its_baselines_again(tmp_path):
    """A CPU's baseline figures are interpreter noise (one torch call read 48 ms once, ~0.1 ms elsewhere):
    the worker never keeps them, so each profile times its own (on a GPU they are kept and reused:
    test_the_judge_reuses_only_matching_figures_and_says_so)."""
    from kernels.problems.spec import get_problem, resolve_kernel
    _, source = resolve_kernel(get_problem("mla_decode"), "starter")
    ref = SourceRef(sha256=hashlib.sha256(source.encode()).hexdigest(), text=source, lines=source.count("\n"))
    inp = EvalInput(tool="profile_kernel", problem="mla_decode", attempt=1, source=ref,
                    settings=EvalSettings(device="cpu"))
    store = ArtifactStore(tmp_path)
    cache = BaselineCache(ttl_s=600)
    first = run_eval(inp, store, cache=cache)
    assert first.verdict.ok and not first.verdict.timing_meaningful
    second = run_eval(inp.model_copy(update={"attempt": 2}), store, cache=cache)
    assert second.verdict.ok and all(r.baselines_reused == {} for r in second.verdict.shapes)
    assert cache.known("mla_decode", "cpu") == []


def test_a_verdict_whose_baselines_all_failed_says_so_in_its_reason():
    """The reason is what a run's ledger and the Web UI keep; a missing ratio must not look like a
    kernel without baselines (seen on an H200: one tuner profile came back with no speedups)."""
    from kernels.evaluator.judge import Judge
    judge = Judge(request_for("mla_decode", "starter", device="cpu"))
    judge.verdict.shapes = [ShapeResult(shape=SMOKE_A, correct=True, latency_us=12.5)]
    judge.verdict.flags = ["baseline torch failed: RuntimeError: boom"]
    assert "12.5 us (no baseline could be timed: see the flags)" in judge._summary()
    judge.verdict.shapes[0].speedup = {"torch": 2.0}
    assert "(2x vs torch)" in judge._summary()
