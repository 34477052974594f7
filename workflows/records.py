"""The pieces of a run's state: kernel sources, attempts and their evaluations, the ledger, the tuner's
trials, the best kernel, and the signals a run exchanges (its agents' news, activities' faults)."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from kernels.evaluator.verdict import Verdict
from workflows import limits as L
from workflows.inputs import Extension, _Input
from workflows.names import ACTIVITY_NAMES


class SourceRef(BaseModel):
    """A kernel source: inline up to RunSpec.inline_source_cap, otherwise only its artifact key."""
    sha256: str
    text: str | None = None
    lines: int = 0


# what a task's attempts are measured against (its metric's ratio), where a kernel names a baseline
TASK_BASELINE = "the task's own files"


class EvalDigest(BaseModel):
    """One evaluation of an attempt, small enough to keep a thousand of."""
    tool: str
    mode: str
    status: str
    reason: str
    speedup: float | None = None  # Verdict.best_speedup(): worst shape against the strongest baseline
    baseline: str | None = None  # the baseline that speedup is against
    speedups: dict[str, float] = Field(default_factory=dict)  # per baseline, its worst shape
    latency_us: float | None = None  # geometric mean over shapes
    roofline_pct: float | None = None  # the lowest over shapes
    artifact: str | None = None  # the full verdict JSON in the artifact store
    tool_call: int = 0
    timing_meaningful: bool = True  # False: a CPU interpreter's times, whose speedups are noise


class Attempt(BaseModel):
    """One candidate kernel: written, edited, configured by the tuner, or the starting kernel."""
    n: int
    origin: Literal["start", "write", "edit", "tuner", "shared"]  # shared: another agent's best, taken over
    parent: int | None = None
    sha256: str
    lines: int = 0
    config: dict[str, Any] | None = None  # its CONFIG, when it declares TUNABLES
    evals: list[EvalDigest] = Field(default_factory=list)
    tool_call: int = 0  # the tool call that created it

    @property
    def status(self) -> str:
        return self.evals[-1].status if self.evals else "unevaluated"

    def best_eval(self) -> EvalDigest | None:
        oks = [e for e in self.evals if e.status == "ok" and e.mode == "full"]
        return max(oks, key=lambda e: e.speedup or 0.0) if oks else None


class RunBest(BaseModel):
    """The run's best kernel: the profiled ok attempt the yardstick (workflows/yardstick.py) ranks first."""
    attempt: int
    source: SourceRef
    verdict: Verdict  # the full verdict, in `marathon eval --json` form
    speedup: float | None = None
    tool_call: int = 0


class ToolCallRecord(BaseModel):
    """The ledger of every tool call that completed, in order: seq is 1, 2, 3, ... with no gaps."""
    seq: int
    tool: str
    call_id: str = ""  # the model's tool_call id (or the tuner's)
    attempt: int | None = None
    ok: bool = True  # False: the tool answered with an error (bad arguments, edit not found, ...)
    summary: str = ""


class TokenUsage(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    max_prompt_tokens: int = 0


class TunerTrial(BaseModel):
    """One configuration the tuner wrote (and, unless writing failed, profiled)."""
    key: str  # canonical JSON of the config
    config: dict[str, Any]
    attempt: int | None = None
    status: str = "pending"  # a verdict status, "pending" (written, not yet profiled) or "write_failed"
    latency_us: float | None = None
    speedup: float | None = None


class TunerState(BaseModel):
    trials: list[TunerTrial] = Field(default_factory=list)
    exhausted: bool = False


class RunSetup(BaseModel):
    """What the prepare activity resolves once, at the start: the workflow never reads files."""
    problem: str
    entry_point: str
    statement: str
    kernel_label: str
    start: SourceRef
    device: str
    shape_set: str | None
    shapes: list[dict[str, int]]
    baselines: list[str]
    tunables: dict[str, list[Any]] | None = None
    config: dict[str, Any] | None = None
    task_key: str | None = None  # a task's bundle in the artifact store: what its evaluations measure


class AgentNews(_Input):
    """What an agent tells the run (and the run its other agents): a new best kernel, a failure worth not
    repeating, or (from the run) a stop, a hint, a pause, a resume or an extension (its share).

    A signal: anyone who can reach the server can send one, so it is validated as an update is, and a
    `best` is a claim only. Its verdict and speedup are never believed: the receiver looks up the
    verdict that this run's own evaluations recorded for the source's SHA-256 (FIND_VERDICT)."""
    agent: int = Field(default=0, ge=0, le=L.MAX_AGENTS)  # 0: the run itself
    kind: Literal["best", "failure", "stop", "hint", "pause", "resume", "extend"]
    extension: Extension | None = None
    line: str = Field(default="", max_length=L.MAX_HINT_CHARS)
    source: SourceRef | None = None
    verdict: Verdict | None = None
    speedup: float | None = Field(default=None, ge=0, le=L.MAX_SPEEDUP)
    config: dict[str, Any] | None = Field(default=None, max_length=64)


class AgentLine(BaseModel):
    """One agent's line in the run's report."""
    agent: int
    workflow_id: str
    status: str  # its stop reason, or why it failed
    tool_calls: int = 0
    attempts: int = 0
    best_speedup: float | None = None
    best_attempt: int | None = None
    shared_taken: int = 0  # other agents' bests it took over


class Fault(_Input):
    """An activity attempt that failed and will be retried: what failed, since when (the activity's
    first scheduling), how often so far. Activities send it (FAULT_SIGNAL); the workflow shows it until
    that activity's call ends, or the run does. A signal: validated, bounded, and only about one of the
    run's own activities."""
    activity: Literal[ACTIVITY_NAMES]  # type: ignore[valid-type]
    attempt: int = Field(ge=1, le=1_000_000)
    message: str = Field(max_length=1000)
    since: datetime

    def line(self, now: datetime) -> str:
        return (f"{self.message.rstrip('.')} for {max(0.0, (now - self.since).total_seconds()):.0f} s "
                f"({self.activity}, {self.attempt} failed attempt{'s' if self.attempt != 1 else ''}); retrying")
