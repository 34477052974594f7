"""The run's working memory: what a model needs to keep aiming at the goal after a day of tool calls.

Pure pydantic models (no I/O), safe to import from workflow code. Trust boundaries:
- `Goal` is copied from the run input and never rewritten by a model.
- `Memory.best` is copied from the workflow's state (the best `ok` kernel), never from a model.
- `Memory.hints` are the user's, copied from the workflow's state.
- strategies, failures, insights, hypotheses and next_plan are written by a summarizer (the model,
  validated, or the deterministic one built from the attempt ledger).

A list entry whose text starts with `MERGED` stands for several older entries merged into one line
when a list outgrew its cap (see `compaction.summarize`); its `merged` field says how many.
"""
from __future__ import annotations

from pydantic import BaseModel, Field

MERGED = "[merged]"


class Goal(BaseModel):
    problem: str
    statement: str = ""
    target: str = ""  # e.g. "beat fla_chunk_kda at B=1,T=8192,H=32,K=V=128; stop at 1.5x"
    baselines: list[str] = Field(default_factory=list)
    shapes: str = ""  # e.g. "bench: B=1,T=8192,H=32,K=128,V=128"
    device: str = ""
    kind: str = "kernel"  # kernel | task (tasks/): which instructions the model gets


class BestKernel(BaseModel):
    attempt: int
    source_sha256: str = ""
    latency_us: float | None = None
    speedups: dict[str, float] = Field(default_factory=dict)  # baseline name -> ratio (>1 is faster)
    summary: str = ""


class Strategy(BaseModel):
    hypothesis: str
    change: str = ""
    effect: str = ""  # measured: "141.2 us, 1.12x vs chunk_kda (was 158.0 us)"
    verdict: str = ""  # kept / reverted / failed / incorrect / untimed ...
    attempt: int | None = None
    merged: int = 0  # >0: this line aggregates that many older entries


class Failure(BaseModel):
    approach: str
    why: str = ""
    attempt: int | None = None
    times: int = 1  # how often this same approach failed
    merged: int = 0  # >0: this line aggregates that many older entries


class Memory(BaseModel):
    goal: Goal
    best: BestKernel | None = None
    strategies: list[Strategy] = Field(default_factory=list)
    failures: list[Failure] = Field(default_factory=list)
    insights: list[str] = Field(default_factory=list)  # profiler insights
    hypotheses: list[str] = Field(default_factory=list)  # open
    next_plan: str = ""
    hints: list[str] = Field(default_factory=list)  # the user's
    compactions: int = 0
    covers_through_turn: int = 0


class AttemptDigest(BaseModel):
    """One evaluated step as the summarizer needs it; the workflow maps its attempt ledger to this.

    `tool` is the tool that produced it (compile_kernel/test_kernel/profile_kernel, or `tuner`),
    `status` the verdict status (ok, rejected, compile_error, incorrect, timeout, crashed),
    `summary` a one-line reading of the result, `note` what the author said it changed or tried."""
    attempt: int
    tool: str
    status: str
    summary: str = ""
    latency_us: float | None = None
    speedup: dict[str, float] = Field(default_factory=dict)
    config: dict | None = None  # the kernel's CONFIG (tunables), when it declares one
    note: str | None = None


class LiveFigures(BaseModel):
    """The only part of the goal block that changes during a run."""
    best_speedup: float | None = None
    best_latency_us: float | None = None
    best_attempt: int | None = None
    tool_calls_used: int = 0
    tool_calls_budget: int = 0
    hours_used: float = 0.0
    hours_budget: float = 0.0


def empty_memory(goal: Goal, hints: list[str] | None = None) -> Memory:
    return Memory(goal=goal, hints=list(hints or []))
