"""The evaluator's front door: `evaluate(request) -> Verdict`. Torch-free, so a CLI or a Temporal
worker can call it without taking a CUDA context: the judging happens in a judge process
(`python -m kernels.evaluator.judge`), which in turn runs the candidate in a process of its own
(`python -m kernels.evaluator.candidate_process`)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, Field

from kernels.evaluator.confinement import die_with_parent, judge_env, scratch_prefix
from kernels.problems.spec import get_problem, resolve_kernel
from kernels.evaluator.verdict import KnownBaseline, Mode, Verdict

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class EvaluatorError(RuntimeError):
    """Infrastructure failed (the judge died, no GPU where one was asked for): not the candidate's
    fault, and worth a retry elsewhere."""


class EvalRequest(BaseModel):
    problem: str
    # a KernelBench-format problem file's source (kernels/problems/kernelbench.py); None: `problem` is built in
    problem_source: str | None = None
    dtype: str | None = None  # the input dtype; None: the problem's for the device
    source: str
    kernel: str = "inline"  # a label for reports: a shipped kernel's name or a path
    device: str = "auto"  # auto | cpu | cuda
    shape_set: str | None = None  # smoke | bench | sweep; None: smoke on the CPU, bench on CUDA
    shapes: list[dict[str, int]] = Field(default_factory=list)  # explicit shapes, instead of a set
    mode: Mode = "full"
    timeout_s: float = 600.0  # wall clock the candidate's process may use in all
    seeds: int = 3
    reps: int | None = None  # timed calls; default 30 on CUDA, 3 on the CPU
    warmup: int | None = None
    baselines: bool = True
    only_baselines: list[str] = Field(default_factory=list)  # time just these (by name); empty: all
    probe_shapes: int = 1  # extra correctness-only shapes drawn at random per evaluation (0: none)
    # baseline timings an earlier evaluation on this GPU measured (kernels/evaluator/baseline_cache.py): the judge
    # reuses a matching one instead of timing that baseline again, and says so in the verdict
    known_baselines: list[KnownBaseline] = Field(default_factory=list)


def request_for(problem: str, kernel: str, problem_source: str | None = None, **settings) -> EvalRequest:
    """A request for a shipped kernel name or a kernel file."""
    label, source = resolve_kernel(get_problem(problem, problem_source), kernel)
    return EvalRequest(problem=problem, problem_source=problem_source, source=source, kernel=label, **settings)


# Set by activities.evaluation.ncu_metrics when it runs the judge under Nsight Compute: a digest of each
# variable of the environment it started ncu with, so the judge can tell which ones ncu added or
# changed (judge.profiler_env) without the values themselves travelling in another variable.
PROFILER_BASE_ENV = "MARATHON_NCU_BASE_ENV"


def env_digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def evaluate(request: EvalRequest, *, heartbeat: Callable[[], None] | None = None,
             judge_grace_s: float = 1800.0) -> Verdict:
    """Judge one candidate. A bad candidate is a Verdict; only infrastructure faults raise."""
    spec = get_problem(request.problem, request.problem_source)  # unknown problems fail here, loudly and early
    for shape in request.shapes:
        spec.shape(shape)
    if request.shape_set is not None:
        spec.shapes(request.shape_set)
    elif spec.source is not None and not request.shapes and request.device == "cpu":
        spec.shapes("smoke")  # a file problem on a CPU needs small shapes: says so here
    if request.dtype is not None and request.dtype not in spec.tolerances:
        raise ValueError(f"--dtype {request.dtype}: {spec.name} knows {', '.join(spec.tolerances)}")
    with tempfile.TemporaryDirectory(prefix=scratch_prefix("marathon-judge")) as tmp:
        req_path, out_path, log_path = (Path(tmp) / n for n in ("request.json", "verdict.json", "judge.log"))
        req_path.write_text(request.model_dump_json())
        # an allowlist of the worker's environment, never a copy: the model's API key stays here
        env = judge_env(tmp, PROJECT_ROOT)
        # the baselines' Triton autotuning (FLA's: most of a KDA baseline's minute and a half) is kept on
        # disk, so a fresh judge process re-times a baseline without re-tuning it; the candidate's
        # process does not inherit this (kernels/evaluator/judge.py candidate_env)
        env.setdefault("TRITON_CACHE_AUTOTUNING", "1")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kernels.evaluator.judge", str(req_path), str(out_path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=tmp,
                start_new_session=True, preexec_fn=die_with_parent())
            deadline = time.monotonic() + request.timeout_s + judge_grace_s
            try:
                while True:
                    try:
                        proc.wait(timeout=2.0)
                        break
                    except subprocess.TimeoutExpired:
                        if heartbeat:
                            heartbeat()
                        if time.monotonic() > deadline:
                            raise EvaluatorError("the judge process outlived its deadline and was killed")
            finally:
                if proc.poll() is None:
                    _kill_group(proc)
        if proc.returncode != 0 or not out_path.exists():
            tail = log_path.read_text(errors="replace")[-3000:]
            raise EvaluatorError(f"the judge process failed (exit {proc.returncode}):\n{tail}")
        return Verdict.model_validate_json(out_path.read_text())


def _kill_group(proc: subprocess.Popen) -> None:
    import signal
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
