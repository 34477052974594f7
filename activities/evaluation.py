"""compile_kernel, test_kernel and profile_kernel as plain functions over the evaluator.

`evaluate` blocks for seconds to minutes (a judge process, a sandbox process); the activity wrapper runs
this in a worker thread and passes Temporal's heartbeat as the callback, so a killed GPU worker's
evaluation is retried elsewhere after the heartbeat timeout. A bad kernel is a Verdict handed to the
model; EvaluatorError (infrastructure) propagates and Temporal retries it."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from activities.artifacts import ArtifactCorrupt, ArtifactStore, capped
from activities.tools import source_text
from kernels.evaluator.baseline_cache import BaselineCache
from kernels.evaluator.confinement import PROFILER_BASE_ENV, env_digest, judge_env, scratch_prefix
from kernels.evaluator.evaluate import PROJECT_ROOT, EvalRequest, evaluate
from kernels.evaluator.verdict import Verdict
from kernels.settings import settings
from kernels.problems.tunables import TunablesError, read_tunables
from tasks import tunables as task_tunables
from tasks.document import DocumentError
from tasks.measure import TaskBroken
from tasks.measure import measure as measure_task
from tasks.spec import TaskBundle
from workflows.names import COMPILE_KERNEL, PROFILE_KERNEL, TEST_KERNEL
from workflows.records import TASK_BASELINE
from workflows.models import (EVAL_MODES, EvalDigest, EvalInput, EvalResult, RecordedVerdict, SourceRef, VerdictLookup,
                              verdict_scope)
from kernels.labels import kv, shape_label
from workflows.yardstick import beats, geomean_latency

NCU_METRICS = {
    "gpu__time_duration.sum": "duration_ns",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct_of_peak",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct_of_peak",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__shared_mem_per_block_static": "static_smem_bytes",
    "launch__shared_mem_per_block_dynamic": "dynamic_smem_bytes",
    "l1tex__t_sector_hit_rate.pct": "l1_hit_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
}


# This worker process's baseline figures (kernels/evaluator/baseline_cache.py); MARATHON_BASELINE_TTL_S=0 times
# every baseline in every evaluation.
BASELINES = BaselineCache()


def eval_request(inp: EvalInput, source: str, cache: BaselineCache | None = None) -> EvalRequest:
    """The evaluator's request for an activity's input (kernels.evaluator.evaluate.request_for makes one
    for a shipped kernel's name or a file, as the CLI has them)."""
    s = inp.settings
    mode = EVAL_MODES[inp.tool]
    # a file problem's baselines are never shared: another file may carry the same name
    cache = cache if inp.problem_source is None else None
    known = cache.known(inp.problem, s.device) if cache is not None and s.baselines and mode == "full" else []
    return EvalRequest(problem=inp.problem, problem_source=inp.problem_source, source=source, kernel=f"attempt {inp.attempt}",
                       device=s.device, dtype=s.dtype,
                       shape_set=None if s.shape_list else s.shapes, shapes=s.shape_list,
                       mode=mode, timeout_s=s.timeout_s, seeds=s.seeds, reps=s.reps,
                       baselines=s.baselines, known_baselines=known)




def digest(tool: str, verdict: Verdict, artifact: str | None) -> EvalDigest:
    if verdict.metric is not None:  # a task's: its gain over its own files is the speedup
        gain = verdict.metric.gain
        return EvalDigest(tool=tool, mode=verdict.mode, status=verdict.status, reason=verdict.reason[:240],
                          speedup=gain, baseline=TASK_BASELINE if gain is not None else None,
                          speedups={TASK_BASELINE: gain} if gain is not None else {}, artifact=artifact,
                          timing_meaningful=verdict.timing_meaningful)
    speedup = verdict.best_speedup()
    baseline = None
    if speedup is not None:
        worst = min((r for r in verdict.shapes if r.speedup), key=lambda r: min(r.speedup.values()))
        baseline = min(worst.speedup, key=worst.speedup.get)
    roof = [r.roofline_pct for r in verdict.shapes if r.roofline_pct is not None]
    speedups: dict[str, float] = {}
    for r in verdict.shapes:
        for name, ratio in r.speedup.items():
            speedups[name] = min(ratio, speedups.get(name, ratio))
    return EvalDigest(
        tool=tool, mode=verdict.mode, status=verdict.status, reason=verdict.reason[:240], speedup=speedup,
        baseline=baseline, speedups=speedups, latency_us=geomean_latency(verdict),
        roofline_pct=min(roof) if roof else None, artifact=artifact, timing_meaningful=verdict.timing_meaningful)


def describe(tool: str, attempt: int, verdict: Verdict, ncu: dict | None = None) -> str:
    """The verdict as the model reads it."""
    verb = {COMPILE_KERNEL: "compile", TEST_KERNEL: "test", PROFILE_KERNEL: "profile"}[tool]
    lines = [f"{verb} attempt {attempt}: {verdict.status.upper()} ({verdict.device}"
             + (f", {verdict.gpu.name}" if verdict.gpu else "") + f", {verdict.elapsed_s:.1f} s)",
             verdict.reason]
    for r in verdict.shapes:
        parts = [f"  {shape_label(r.shape)}: " + ("correct" if r.correct else "NOT correct")]
        if r.rel_err is not None:
            parts.append(f"rel_err {r.rel_err:.2e}")
        if r.latency_us is not None:
            parts.append(f"{r.latency_us:.2f} us (p10 {r.timing.p10_us:.2f}, p90 {r.timing.p90_us:.2f})" if r.timing
                         else f"{r.latency_us:.2f} us")
            if r.timing and r.timing.graph_median_us:
                parts.append(f"CUDA graph {r.timing.graph_median_us:.2f} us")
        for name, ratio in r.speedup.items():
            age = r.baselines_reused.get(name)
            parts.append(f"{ratio:.3g}x vs {name} ({r.baselines.get(name, 0):.2f} us"
                         + (f", timed {age:.0f} s ago on this worker)" if age is not None else ")"))
        if r.roofline_pct is not None:
            parts.append(f"{r.roofline_pct:.1f}% of roofline (floor {r.floor_us:.2f} us)")
        if r.note:
            parts.append(r.note)
        lines.append("; ".join(parts))
    if verdict.shapes and not verdict.timing_meaningful and any(r.latency_us for r in verdict.shapes):
        lines.append("  (CPU / Triton interpreter: times are not meaningful)")
    lines += [f"  flag: {f}" for f in verdict.flags]
    if ncu:
        lines.append("  Nsight Compute: " + "; ".join(
            f"{k}: " + kv(vals, ", ") for k, vals in ncu.items()))
    if verdict.status != "ok" and verdict.log_tail.strip():
        lines += ["candidate output (tail):", verdict.log_tail.strip()[-2500:]]
    return "\n".join(lines)


def ncu_path() -> str | None:
    """The Nsight Compute CLI: $MARATHON_NCU, else `ncu` on PATH, else the newest one under
    /opt/nvidia/nsight-compute (CUDA images install it there without putting it on PATH)."""
    named = settings().ncu
    if named:
        return named if os.access(named, os.X_OK) else None
    found = shutil.which("ncu")
    if found:
        return found
    installed = sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"))
    return str(installed[-1]) if installed else None


def ncu_metrics(req: EvalRequest, kernels: list[str], timeout_s: float = 600.0) -> dict | str:
    """Nsight Compute metrics of the candidate's own kernels at the first shape: the judge runs once more
    under `ncu --target-processes all`, so the candidate still runs only inside the evaluator's sandbox.
    Compile mode: one call of the candidate, no reference and no probe shapes (the verdict that asked
    for this has checked it already). In test mode the re-run took 102 s for KDA on the H200 (19 s for
    MLA; kernels/problems/mla_decode/NOTES.md, "Nsight Compute on the tuned kernel"): ncu intercepts every launch, and the KDA reference
    alone launches thousands of kernels. A dict {kernel: {metric: value}}, or a string saying why
    there is none."""
    ncu = ncu_path()
    if ncu is None:
        return "ncu is not installed on this worker (nor named by MARATHON_NCU)"
    names = sorted({k.split(".")[-1] for k in kernels})
    if not names:
        return "no candidate kernels were seen"
    shapes = req.shapes[:1] or []
    probe = req.model_copy(update={"mode": "compile", "seeds": 1, "baselines": False, "shapes": shapes,
                                   "shape_set": req.shape_set if not shapes else None})
    with tempfile.TemporaryDirectory(prefix=scratch_prefix("marathon-ncu")) as tmp:
        req_path, out_path = Path(tmp) / "request.json", Path(tmp) / "verdict.json"
        req_path.write_text(probe.model_dump_json())
        env = judge_env(tmp, PROJECT_ROOT)  # an allowlist of this worker's environment, as evaluate() gives
        # what ncu adds to this environment the judge hands on to the candidate's process (confinement.profiler_env)
        env[PROFILER_BASE_ENV] = json.dumps({k: env_digest(v) for k, v in env.items()})
        # clocks left alone: ncu would otherwise lock them to base, and durations would not match
        # the evaluator's timings
        cmd = [ncu, "--target-processes", "all", "--clock-control", "none", "--csv", "--page", "raw", "--launch-count", "8",
               "--kernel-name", "regex:" + "|".join(names), "--metrics", ",".join(NCU_METRICS),
               sys.executable, "-m", "kernels.evaluator.judge", str(req_path), str(out_path)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return "ncu timed out"
    rows = [line for line in proc.stdout.splitlines() if line.startswith('"')]
    if len(rows) < 2:
        return f"ncu captured no kernels (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
    out: dict[str, dict[str, str]] = {}
    reader = csv.DictReader(io.StringIO("\n".join(rows)))
    for row in reader:
        name = row.get("Kernel Name") or row.get("Function Name") or "?"
        if not any(n in name for n in names):
            continue
        out.setdefault(name[:60], {label: row.get(metric, "") for metric, label in NCU_METRICS.items()
                                   if row.get(metric) not in (None, "", "n/a")})
    return out or "ncu captured none of the candidate's kernels"


def _slim(verdict: Verdict) -> Verdict:
    """The verdict as history keeps it: minus the candidate's long log (the artifact has it all)."""
    return verdict.model_copy(update={"log_tail": verdict.log_tail[-1500:]})


def run_eval(inp: EvalInput, store: ArtifactStore, heartbeat: Callable[[], None] | None = None,
             cache: BaselineCache | None = BASELINES, recorded_by: str | None = None) -> EvalResult:
    """Judge one candidate. With `recorded_by` (the calling workflow's id, as Temporal names it to the
    activity) an ok profile is also recorded worker-side under the source's SHA-256, where the run finds
    it again when someone claims that source as a best (find_verdict). A task's candidate (`task_key`)
    is measured against the task's own files instead (tasks/measure.py)."""
    source = source_text(inp.source, store)
    if inp.task_key is not None:
        return _run_task(inp, source, store, heartbeat, recorded_by)
    req = eval_request(inp, source, cache)
    verdict = evaluate(req, heartbeat=heartbeat, judge_grace_s=600.0)
    # a CPU's baseline figures are interpreter noise: never reused
    if cache is not None and inp.problem_source is None and verdict.timing_meaningful:
        cache.learn(inp.problem, inp.settings.device, verdict)
    artifact = store.put(verdict.model_dump_json(indent=2))
    if verdict.problem_error:  # the problem's own failure (its detail kept in the artifact): the run ends
        raise ProblemFault(f"{verdict.problem_error} (the whole record: artifact {artifact[:12]})")
    if recorded_by and verdict.ok and verdict.mode == "full":
        store.record_verdict(verdict_scope(inp.problem, inp.problem_source, inp.settings), recorded_by,
                             inp.source.sha256, artifact)
    ncu = None
    if (inp.tool == PROFILE_KERNEL and inp.settings.ncu and verdict.ok and verdict.device == "cuda"
            and ncu_path()):
        found = ncu_metrics(req, verdict.kernels_launched)
        ncu = found if isinstance(found, dict) else {"unavailable": {"why": found}}
    text, _ = capped(describe(inp.tool, inp.attempt, verdict, ncu), inp.output_cap, store)
    return EvalResult(text=text, verdict=_slim(verdict), digest=digest(inp.tool, verdict, artifact), ncu=ncu)


def task_bundle(key: str, store: ArtifactStore) -> TaskBundle:
    return TaskBundle.model_validate_json(store.get(key))  # hash-checked against its key


def task_cache_root() -> Path:
    """Where this worker keeps each task's folder, made once (its setup run) and copied per measurement."""
    root = settings().task_cache or Path(tempfile.gettempdir()) / "marathon-task-cache"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _run_task(inp: EvalInput, source: str, store: ArtifactStore, heartbeat, recorded_by: str | None) -> EvalResult:
    """compile_kernel and test_kernel run the guard; profile_kernel the guard and the metric. A task whose
    own files fail is the task's fault: a non-retryable error that ends the run, saying so."""
    bundle = task_bundle(inp.task_key, store)
    mode = "full" if inp.tool == PROFILE_KERNEL else "test"
    try:
        verdict = measure_task(bundle, source, task_cache_root(), mode=mode, heartbeat=heartbeat,
                               kernel=f"attempt {inp.attempt}")
    except TaskBroken as exc:
        raise TaskFault(str(exc)) from None
    artifact = store.put(verdict.model_dump_json(indent=2))
    if recorded_by and verdict.ok and verdict.mode == "full":
        store.record_verdict(verdict_scope(inp.problem, None, inp.settings, inp.task_key), recorded_by,
                             inp.source.sha256, artifact)
    text, _ = capped(describe_task(inp.tool, inp.attempt, verdict), inp.output_cap, store)
    return EvalResult(text=text, verdict=_slim(verdict), digest=digest(inp.tool, verdict, artifact))


class ProblemFault(ValueError):
    """A file problem's own code fails (or cannot take the shape asked for): no candidate can be judged,
    so the run cannot go on; the activity wrapper raises it non-retryable, in one line with the file's line."""


class TaskFault(ValueError):
    """The task's own files fail (its guard, its metric): the run cannot go on; the activity wrapper
    raises it non-retryable."""


def describe_task(tool: str, attempt: int, verdict: Verdict) -> str:
    """A task's verdict as the model reads it."""
    verb = "measure" if tool == PROFILE_KERNEL else "guard"
    m = verdict.metric
    lines = [f"{verb} attempt {attempt}: {verdict.status.upper()} ({verdict.elapsed_s:.1f} s)", verdict.reason]
    if m is not None:
        if m.changed:
            lines.append(f"  files changed: {', '.join(m.changed)}")
        if m.samples:
            unit = f" {m.unit}" if m.unit else ""
            lines.append(f"  samples: {', '.join(f'{x:.4g}' for x in m.samples)}{unit}; the task's own: "
                         f"{', '.join(f'{x:.4g}' for x in m.baseline_samples)}{unit}")
        if verdict.status != "ok" and m.guard_tail.strip():
            lines += ["guard output (tail):", m.guard_tail.strip()[-2000:]]
    if verdict.status != "ok" and verdict.log_tail.strip():
        lines += ["metric output (tail):", verdict.log_tail.strip()[-2000:]]
    return "\n".join(lines)


def find_verdict(inp: VerdictLookup, store: ArtifactStore) -> RecordedVerdict:
    """The best ok profile of a source that evaluations of `inp.workflow_ids` recorded under the run's
    scope, read back from the store (every verdict and the source hash-checked against their keys), or
    an empty answer. What a claim said about the source plays no part."""
    scope = verdict_scope(inp.problem, inp.problem_source, inp.settings, inp.task_key)
    found: RecordedVerdict | None = None
    for workflow_id in inp.workflow_ids:
        for key in store.recorded_verdicts(scope, workflow_id, inp.source_sha256):
            try:
                verdict = Verdict.model_validate_json(store.get(key))
            except (KeyError, ValueError, ArtifactCorrupt):  # gone, changed, or not a verdict: not evidence
                continue
            if not (verdict.ok and verdict.mode == "full") or verdict.source_sha256 not in ("", inp.source_sha256):
                continue
            d = digest(PROFILE_KERNEL, verdict, key)
            if found is None or beats(d.speedup, d.latency_us, found.digest.speedup, found.digest.latency_us):
                found = RecordedVerdict(workflow_id=workflow_id, verdict=_slim(verdict), digest=d)
    if found is None:
        return RecordedVerdict()
    try:
        text = store.get(inp.source_sha256)
    except (KeyError, ArtifactCorrupt):  # a verdict without its source: nothing to hand on
        return RecordedVerdict()
    found.source = SourceRef(sha256=inp.source_sha256, text=text if len(text) <= inp.inline_cap else None,
                             lines=text.count("\n") + 1)
    try:
        tunables = (task_tunables.read_tunables(task_bundle(inp.task_key, store), text) if inp.task_key
                    else read_tunables(text))
    except (TunablesError, task_tunables.TaskTunablesError, DocumentError, KeyError, ArtifactCorrupt):
        tunables = None
    found.config = tunables[1] if tunables else None
    return found
