"""The evaluator's front door: `evaluate(request) -> Verdict`. Torch-free, so a CLI or a Temporal
worker can call it without taking a CUDA context: the judging happens in a judge process
(`python -m kernels.evaluator.judge`), which in turn runs the candidate in a process of its own
(`python -m kernels.evaluator.candidate_process`)."""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, Field

from kernels.evaluator.confinement import die_with_parent, judge_env, make_non_dumpable, scratch_prefix, scrub
from kernels.problems.kernelbench import ReferenceCall
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


class ProblemCheck(BaseModel):
    """`marathon problem`'s request: a KernelBench-format file checked in its fenced process."""
    problem: str
    problem_source: str
    device: str = "cpu"  # auto | cpu | cuda
    dtype: str | None = None  # the inputs' dtype for the reference calls; None: the problem's
    shapes: list[dict[str, int]] = Field(default_factory=list)  # values given (--shape); none: the device's set
    run_reference: bool = True  # the reference once per shape (the run's preparation needs only the facts)
    need_smoke: bool = True  # small sizes for a CPU must be found (a GPU run's preparation: only noted otherwise)
    timeout_s: float = 900.0


class ProblemReport(BaseModel):
    """What `marathon problem` prints (and `--json` as this object)."""
    name: str
    device: str
    dtype: str
    dimensions: dict[str, int] = Field(default_factory=dict)  # the sizes: constants that shape inputs and parameters
    constants: dict[str, int | float | bool | str] = Field(default_factory=dict)  # every other constant
    shapes: dict[str, list[dict[str, int]]] = Field(default_factory=dict)  # smoke, bench
    chosen: str = ""  # what the problem chose by itself (small sizes for a CPU), in words
    reference: list[ReferenceCall] = Field(default_factory=list)  # once per shape judged on the device
    statement: str = ""
    error: str | None = None  # the problem's own failure: one line with the file's line
    line: int | None = None
    bad_request: str | None = None  # a shape or dtype the file cannot take as asked (one line)

    @property
    def ok(self) -> bool:
        return self.error is None and self.bad_request is None and all(c.status == "ok" for c in self.reference)


def request_for(problem: str, kernel: str, problem_source: str | None = None, **settings) -> EvalRequest:
    """A request for a shipped kernel name or a kernel file."""
    label, source = resolve_kernel(get_problem(problem, problem_source), kernel)
    return EvalRequest(problem=problem, problem_source=problem_source, source=source, kernel=label, **settings)


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


class _Spare:
    """A judge process started ahead of need, waiting for its one request on stdin, with its scratch
    folder (the judge's HOME and cwd) and log, and the environment it was started with."""

    def __init__(self, env_for: Callable[[str], dict[str, str]]) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix=scratch_prefix("marathon-judge"))
        self.env = env_for(self.tmp.name)
        self.log_path = Path(self.tmp.name) / "judge.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kernels.evaluator.judge", "--await-request"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.PIPE, env=self.env, cwd=self.tmp.name,
                start_new_session=True, preexec_fn=die_with_parent())

    def discard(self) -> None:
        if self.proc.poll() is None:
            _kill_group(self.proc)
        if self.proc.stdin:
            self.proc.stdin.close()
        self.tmp.cleanup()


class JudgePool:
    """Judge processes started ahead of need, so that an evaluation finds one with Python, torch and
    Triton imported and its candidate process started (kernels/evaluator/judge.py --await-request).
    Each judge, and each candidate process, still serves exactly one evaluation and exits: isolation
    is as for a judge started on demand. A spare knows nothing of its request until it is handed the
    request's file, holds no GPU context while it waits, and dies with the worker: it is started by
    the pool's own thread, which lives as long as the worker's process, with the parent-death signal.
    A spare whose environment no longer matches the one a judge would get now (a switch changed) is
    discarded, never used. Off until `keep_warm` (a worker serving evaluations turns it on; a
    one-shot `marathon eval` has no next evaluation to start ahead for)."""

    def __init__(self) -> None:
        self.size = 0
        self._lock = threading.Lock()
        self._spares: list[_Spare] = []
        self._wanted = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def keep_warm(self, size: int = 1) -> None:
        """Keep `size` spare judges started (0: none, and the spares are discarded)."""
        with self._lock:
            self.size = max(size, 0)
            if self.size and self._thread is None:
                self._thread = threading.Thread(target=self._starter, name="marathon-judge-pool", daemon=True)
                self._thread.start()
                atexit.register(self.close)
            self._wanted.notify_all()
        if not size:
            self.close()

    def take(self) -> _Spare | None:
        """A spare started with the environment a judge would get now, or None (none ready: start one
        on demand). The pool starts the next spare at once."""
        with self._lock:
            spare = self._spares.pop(0) if self._spares else None
            self._wanted.notify_all()
        if spare is None:
            return None
        if spare.proc.poll() is None and spare.env == _judge_env(spare.tmp.name):
            return spare
        spare.discard()
        return None

    def close(self) -> None:
        with self._lock:
            spares, self._spares = self._spares, []
        for spare in spares:
            spare.discard()

    def _starter(self) -> None:
        while True:
            with self._lock:
                while len(self._spares) >= self.size:
                    self._wanted.wait()
            try:
                spare = _Spare(_judge_env)
            except OSError:
                time.sleep(5.0)
                continue
            with self._lock:
                wanted = len(self._spares) < self.size  # keep_warm(0) may have come while it started
                if wanted:
                    self._spares.append(spare)
            if not wanted:
                spare.discard()


JUDGES = JudgePool()  # this worker's spare judges


def _judge_env(scratch: str) -> dict[str, str]:
    # an allowlist of the worker's environment, never a copy: the model's API key stays here
    env = judge_env(scratch, PROJECT_ROOT)
    # the baselines' Triton autotuning (FLA's: most of a KDA baseline's minute and a half) is kept on
    # disk, so a fresh judge process re-times a baseline without re-tuning it; the candidate's
    # process does not inherit this (kernels/evaluator/confinement.py sandbox_env)
    env.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    return env


def evaluate(request: EvalRequest, *, heartbeat: Callable[[], None] | None = None,
             judge_grace_s: float = 1800.0) -> Verdict:
    """Judge one candidate. A bad candidate is a Verdict; only infrastructure faults raise. This
    process (a worker, the CLI: it may hold the model's API key) is made non-dumpable first, and no
    value of its environment leaves in the verdict or an error (confinement.scrub)."""
    make_non_dumpable()  # nothing below it reads its environ or memory without CAP_SYS_PTRACE
    try:
        return _evaluate(request, heartbeat, judge_grace_s)
    except EvaluatorError as exc:
        raise EvaluatorError(scrub(str(exc))) from None


def _evaluate(request: EvalRequest, heartbeat: Callable[[], None] | None, judge_grace_s: float) -> Verdict:
    spec = get_problem(request.problem, request.problem_source)  # unknown problems fail here, loudly and early
    for shape in request.shapes:
        spec.shape(shape)
    if request.shape_set is not None:
        spec.shapes(request.shape_set)
    if request.dtype is not None and request.dtype not in spec.tolerances:
        raise ValueError(f"--dtype {request.dtype}: {spec.name} knows {', '.join(spec.tolerances)}")
    t0 = time.monotonic()
    spare = JUDGES.take()
    with (spare.tmp if spare else tempfile.TemporaryDirectory(prefix=scratch_prefix("marathon-judge"))) as tmp:
        req_path, out_path, log_path = (Path(tmp) / n for n in ("request.json", "verdict.json", "judge.log"))
        req_path.write_text(request.model_dump_json())
        if spare:
            proc = spare.proc
            try:  # its assignment: the request's paths, the first it learns of them
                proc.stdin.write((json.dumps([str(req_path), str(out_path)]) + "\n").encode())
                proc.stdin.close()
            except OSError:
                pass  # it died waiting: its exit status and log say so below
        else:
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "kernels.evaluator.judge", str(req_path), str(out_path)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_judge_env(tmp), cwd=tmp,
                    start_new_session=True, preexec_fn=die_with_parent())
        _await_judge(proc, request.timeout_s + judge_grace_s, heartbeat, out_path, log_path)
        verdict = Verdict.model_validate(scrub(json.loads(out_path.read_text())))
    # what the judge's own clock did not see: starting it (or handing the request to a spare) and its exit
    verdict.phases_s["judge_process"] = round(max(time.monotonic() - t0 - verdict.elapsed_s, 0.0), 3)
    verdict.sandbox["warm_judge"] = spare is not None
    return verdict


def check_problem(request: ProblemCheck, *, heartbeat: Callable[[], None] | None = None) -> ProblemReport:
    """A file problem checked in its fenced process, through a judge process (the file's code runs in
    neither this process nor the judge's): kernels/evaluator/judge.py check_problem. Only
    infrastructure faults raise (EvaluatorError); the problem's own failure is the report's error."""
    make_non_dumpable()
    get_problem(request.problem, request.problem_source)  # a file that is not in the format fails here, in one line
    with tempfile.TemporaryDirectory(prefix=scratch_prefix("marathon-judge")) as tmp:
        req_path, out_path, log_path = (Path(tmp) / n for n in ("request.json", "report.json", "judge.log"))
        req_path.write_text(request.model_dump_json())
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kernels.evaluator.judge", "--check-problem", str(req_path), str(out_path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_judge_env(tmp), cwd=tmp,
                start_new_session=True, preexec_fn=die_with_parent())
        _await_judge(proc, request.timeout_s, heartbeat, out_path, log_path)
        return ProblemReport.model_validate(scrub(json.loads(out_path.read_text())))


def _await_judge(proc: subprocess.Popen, limit_s: float, heartbeat: Callable[[], None] | None,
                 out_path: Path, log_path: Path) -> None:
    """Wait for a judge process, heartbeating, for at most limit_s; its process group is killed when it
    overstays or this wait is interrupted. A judge that wrote no result is an infrastructure fault whose
    message carries its log's tail, scrubbed of this process's environment."""
    deadline = time.monotonic() + limit_s
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
        tail = scrub(log_path.read_text(errors="replace")[-3000:]) if log_path.exists() else ""
        raise EvaluatorError(f"the judge process failed (exit {proc.returncode}):\n{tail}")


def _kill_group(proc: subprocess.Popen) -> None:
    import signal
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
