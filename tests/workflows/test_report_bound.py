"""A run's report is its workflow's result: past Temporal's 2 MB payload limit the completion fails on
every try and the run stays Running. RunReport.fitted keeps it under its bound, the best attempt kept."""
from __future__ import annotations

from kernels.evaluator.verdict import Verdict
from workflows import limits
from workflows.outcome import BestReport, RunReport
from workflows.records import Attempt, EvalDigest, TokenUsage


def report(attempts: int, best: int | None = None, notes: int = 5) -> RunReport:
    digest = EvalDigest(tool="evaluate", mode="full", status="incorrect", reason="wrong answer at B=1 " + "x" * 400)
    ledger = [Attempt(n=n, origin="write", sha256=f"{n:064x}", lines=120, evals=[digest] * 3, tool_call=n)
              for n in range(1, attempts + 1)]
    top = None if best is None else BestReport(
        attempt=best, source="def k(): pass\n", sha256="0" * 64, speedup=1.5,
        verdict=Verdict(status="ok", reason="", problem="mla_decode", kernel="k", device="cpu"))
    return RunReport(workflow_id="w", problem="mla_decode", policy="agent", stop_reason="budget", tool_calls=attempts,
                     turns=attempts, attempts=attempts, continue_as_new=0, compactions=0, hours=1.0,
                     tokens=TokenUsage(), best=top, ledger=ledger, notes=[f"note {i} " + "y" * 400 for i in range(notes)])


def size(rep: RunReport) -> int:
    return len(rep.model_dump_json().encode())


def test_a_report_under_its_bound_is_left_as_it_is():
    rep = report(100, best=7)
    assert size(rep) < limits.MAX_REPORT_BYTES
    assert rep.fitted(limits.MAX_REPORT_BYTES) == rep


def test_a_report_past_its_bound_loses_its_oldest_attempts_and_says_so():
    rep = report(3000)
    assert size(rep) > 2_000_000  # past Temporal's payload limit as it stands
    fit = rep.fitted(limits.MAX_REPORT_BYTES)
    assert size(fit) <= limits.MAX_REPORT_BYTES
    kept = [a.n for a in fit.ledger]
    assert kept == list(range(3001 - len(kept), 3001)) and fit.ledger_dropped == 3000 - len(kept) > 0
    assert fit.attempts == 3000 and f"leaves out the {fit.ledger_dropped} oldest attempts" in fit.notes[-1]
    assert fit.notes[:-1] == rep.notes and rep.ledger_dropped == 0 and len(rep.ledger) == 3000  # rep untouched
    assert fit == rep.fitted(limits.MAX_REPORT_BYTES)  # deterministic: a replay makes the same result


def test_the_best_attempt_stays_however_old_and_notes_and_memory_go_last():
    fit = report(3000, best=1, notes=500).fitted(100_000)
    assert [a.n for a in fit.ledger] == [1] and fit.ledger_dropped == 2999
    assert len(fit.notes) == 21 and fit.notes[-2].startswith("note 499 ") and size(fit) <= 100_000
