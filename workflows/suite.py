"""A suite: one marathon per problem, each a child workflow of one parent (KernelSuite), at most
`parallel` at a time. The parent survives crashes as a run does (its children's results are in its
history), and its report scores the suite as KernelBench does: fast_p, the share of problems whose
best kernel is correct and more than p times faster than eager PyTorch, and the geometric mean of
the speedups over eager of the problems solved."""
from __future__ import annotations

import asyncio
import math

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError, ChildWorkflowError

from workflows import limits, names
from workflows.models import RunReport, RunSpec, describe_invalid
from workflows.raw_input import decode_input

FAST_P = (0.0, 1.0, 1.5, 2.0)
SUITE_PROBLEMS = "problems"  # the memo key of a suite: how many problems it runs (for `marathon runs`)
EAGER = "eager"  # the baseline fast_p is measured against (a file problem's Model in eager mode)


class SuiteSpec(BaseModel):
    """The suite workflow's input: the runs, whole (each problem's source travels inside its RunSpec)."""
    model_config = ConfigDict(extra="forbid")  # a misspelled field is refused, not ignored
    runs: list[RunSpec] = Field(min_length=1, max_length=limits.MAX_SUITE_RUNS)
    parallel: int = Field(default=1, ge=1, le=limits.MAX_PARALLEL)  # child runs at once

    @field_validator("runs")
    @classmethod
    def _runs_are_fresh(cls, runs: list[RunSpec]) -> list[RunSpec]:
        """A suite's run starts afresh: `carry` (a state so far: a best, its verdict) and `agent` are set only
        by a run itself, and a child would take them from the suite's input, which anyone may write."""
        for i, r in enumerate(runs):
            for field in ("carry", "agent"):
                if getattr(r, field) is not None:
                    raise ValueError(f"runs.{i}.{field}: set by a run itself, never in a suite's input; leave it out")
        return runs


class SuiteEntry(BaseModel):
    problem: str
    workflow_id: str
    status: str  # the best kernel's verdict status; "no kernel" or "failed" when there is none
    reason: str = ""
    best_attempt: int | None = None
    speedups: dict[str, float] = Field(default_factory=dict)  # baseline -> geometric mean over the shapes
    speedup_vs_eager: float | None = None
    stop_reason: str = ""  # why its run stopped (its RunReport's), or why it failed
    timing_meaningful: bool = True  # False: its best's times are a CPU interpreter's, its speedups noise


class SuiteReport(BaseModel):
    workflow_id: str
    problems: list[SuiteEntry]
    fast_p: dict[str, float]  # "fast_0", "fast_1", "fast_1.5", "fast_2" -> share of the problems
    geomean_speedup_vs_eager: float | None  # over the problems with a correct kernel


def child_id(suite_id: str, index: int, problem: str) -> str:
    """The workflow id of a suite's index-th problem's run."""
    return f"{suite_id}/{index}-{problem}"


def _sig(x: float) -> float:
    """Four significant figures: an interpreter's speedup of 0.0000285x stays that, not 0 (which would
    also drop it from the geometric mean)."""
    return float(f"{x:.4g}")


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def entry_from_report(problem: str, workflow_id: str, report: RunReport) -> SuiteEntry:
    best = report.best
    if best is None:
        return SuiteEntry(problem=problem, workflow_id=workflow_id, status="no kernel", reason=report.stop_reason,
                          stop_reason=report.stop_reason)
    v = best.verdict
    names_ = sorted({k for s in v.shapes for k in s.speedup})
    speedups = {k: _sig(g) for k in names_
                if (g := _geomean([s.speedup[k] for s in v.shapes if k in s.speedup])) is not None}
    return SuiteEntry(problem=problem, workflow_id=workflow_id, status=v.status, reason=v.reason[:300],
                      best_attempt=best.attempt, speedups=speedups, speedup_vs_eager=speedups.get(EAGER),
                      stop_reason=report.stop_reason, timing_meaningful=v.timing_meaningful)


def score(workflow_id: str, entries: list[SuiteEntry]) -> SuiteReport:
    solved = [e for e in entries if e.status == "ok"]
    fast = {}
    for p in FAST_P:  # faster than eager counts only where the times mean something (not an interpreter's)
        hits = [e for e in solved if p == 0 or (e.timing_meaningful and e.speedup_vs_eager is not None
                                                and e.speedup_vs_eager > p)]
        fast[f"fast_{p:g}"] = round(len(hits) / len(entries), 4) if entries else 0.0
    gm = _geomean([e.speedup_vs_eager for e in solved if e.speedup_vs_eager is not None])
    return SuiteReport(workflow_id=workflow_id, problems=entries, fast_p=fast,
                       geomean_speedup_vs_eager=_sig(gm) if gm is not None else None)


@workflow.defn(name=names.SUITE_WORKFLOW_TYPE)
class KernelSuite:
    def __init__(self) -> None:
        self.done: list[SuiteEntry] = []

    # the input arrives undecoded and is decoded and validated here (as KernelOptimization's is): a bad
    # one (or one the data converter cannot read) fails the suite at once, naming the field, rather than
    # its workflow task for ever
    @workflow.run
    async def run(self, raw: RawValue = None) -> SuiteReport:  # type: ignore[assignment]
        value = decode_input(raw, "BadSuiteSpec", "suite input")
        try:
            spec = SuiteSpec.model_validate(value)
        except ValidationError as err:
            raise ApplicationError(f"bad suite input: {describe_invalid(err)}", type="BadSuiteSpec",
                                   non_retryable=True) from None
        parent = workflow.info().workflow_id
        gate = asyncio.Semaphore(spec.parallel)

        async def one(i: int, run: RunSpec) -> SuiteEntry:
            child = child_id(parent, i, run.problem)
            async with gate:
                try:
                    report = await workflow.execute_child_workflow(
                        names.WORKFLOW_TYPE, run, id=child, result_type=RunReport,
                        static_summary=f"{run.problem} in suite {parent}")
                    entry = entry_from_report(run.problem, child, report)
                except ChildWorkflowError as err:
                    entry = SuiteEntry(problem=run.problem, workflow_id=child, status="failed",
                                       reason=str(err.cause or err)[:300], stop_reason=str(err.cause or err)[:300])
            self.done.append(entry)
            return entry

        entries = await asyncio.gather(*(one(i, r) for i, r in enumerate(spec.runs)))
        return score(parent, list(entries))

    @workflow.query
    def finished(self) -> list[SuiteEntry]:
        return list(self.done)
