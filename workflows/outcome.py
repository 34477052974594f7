"""What a run shows: its status (a query), and its report (the workflow's result)."""
from __future__ import annotations

from pydantic import BaseModel, Field

from compaction.memory import Memory
from kernels.evaluator.verdict import Verdict
from workflows.records import AgentLine, Attempt, EvalDigest, Fault, RunBest, TokenUsage


class RunStatus(BaseModel):
    problem: str
    policy: str
    phase: str  # starting | running | pausing | paused | stopping | finished
    step: str  # what it is doing now, in words
    tool_calls: int
    tool_calls_budget: int
    turns: int
    hours_used: float
    hours_budget: float
    best_speedup: float | None
    best_attempt: int | None
    attempts: int
    continue_as_new: int
    compactions: int
    tokens: TokenUsage
    notebook: list[str]
    stop_reason: str | None = None
    fault: Fault | None = None  # an activity failing right now, retried


class BestReport(BaseModel):
    attempt: int
    source: str | None  # None only when the source lives in the artifact store alone
    sha256: str
    speedup: float | None
    verdict: Verdict

    @classmethod
    def of(cls, best: RunBest) -> BestReport:
        return cls(attempt=best.attempt, source=best.source.text, sha256=best.source.sha256, speedup=best.speedup,
                   verdict=best.verdict)


class RunReport(BaseModel):
    workflow_id: str
    problem: str
    policy: str
    stop_reason: str
    tool_calls: int
    turns: int
    attempts: int
    continue_as_new: int
    compactions: int
    hours: float
    tokens: TokenUsage
    best: BestReport | None
    best_sweep: EvalDigest | None = None  # the best kernel tested on the sweep shapes after the run
    segment_history_bytes: list[int] = Field(default_factory=list)
    ledger: list[Attempt] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    memory: Memory | None = None
    agents: list[AgentLine] = Field(default_factory=list)  # islands: one line per agent
    ledger_dropped: int = 0  # the oldest attempts left out to keep the report under its bound (fitted)

    def fitted(self, max_bytes: int) -> RunReport:
        """This report within `max_bytes` of JSON: a workflow's result past Temporal's 2 MB payload limit
        fails its completion on every try and leaves the run Running for ever. The oldest attempts go
        first (the best's stays), then the notes but the last 20, then the memory; the artifact store and
        the run's history keep all of them. Deterministic: a function of the report alone."""
        rep = self
        while len(rep.model_dump_json().encode()) > max_bytes:
            best = rep.best.attempt if rep.best else None
            ledger = [a for a in rep.ledger if a.n != best]
            if ledger:
                gone = {a.n for a in ledger[: max(1, len(ledger) // 2)]}
                rep = rep.model_copy(update={"ledger": [a for a in rep.ledger if a.n not in gone],
                                             "ledger_dropped": rep.ledger_dropped + len(gone)})
            elif len(rep.notes) > 20:
                rep = rep.model_copy(update={"notes": rep.notes[-20:]})
            elif rep.memory is not None:
                rep = rep.model_copy(update={"memory": None})
            else:
                break  # what is left is bounded by the run's own limits (a source, a verdict)
        if rep.ledger_dropped > self.ledger_dropped:
            rep.notes = [*rep.notes, f"the report leaves out the {rep.ledger_dropped} oldest attempts "
                                     f"(over {max_bytes / 1e6:.1f} MB); the run's history keeps them"]
        return rep
