"""The run's memory: compaction (the transcript and the evaluations since the last one, folded into the
compacted Memory by the compact activity: the model's summary, or the deterministic ledger alone), and
the figures a prompt and a memory show of the run. Both policies keep one: the model reads it, and a
tuner run's report hands it to a later run. Runs inside the workflow."""
from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.compaction import CompactInput, CompactResult
    from compaction.memory import BestKernel as MemoryBest
    from compaction.memory import LiveFigures
    from compaction.prompt import tail_turns
    from compaction.summarize import clip_transcript
    from workflows import names

from workflows.run import Run, short

KEEP_TURNS = 4  # turns kept verbatim after a compaction,
KEEP_FRACTION = 0.3  # at most this share of the context budget (so compaction does not thrash)


def figures(run: Run) -> LiveFigures:
    st, b = run.state, run.state.best
    return LiveFigures(best_speedup=b.speedup if b else None,
                       best_latency_us=run.best_latency(), best_attempt=b.attempt if b else None,
                       tool_calls_used=st.tool_calls, tool_calls_budget=st.budget_tool_calls,
                       hours_used=round(run.hours_used(), 2), hours_budget=st.budget_hours)


def memory_best(run: Run) -> MemoryBest | None:
    """The run's best as the memory keeps it."""
    b = run.state.best
    if b is None:
        return None
    a = run.state.attempt(b.attempt)
    e = a.best_eval() if a else None
    return MemoryBest(attempt=b.attempt, source_sha256=b.source.sha256, latency_us=run.best_latency(),
                      speedups=dict(e.speedups) if e else {}, summary=short(b.verdict.reason, 300))


async def compact(run: Run, tokens_before: int | None = None) -> None:
    st, spec = run.state, run.spec
    run.step = f"compacting ({st.calls_since_compaction} tool calls since the last)"
    inp = CompactInput(memory=st.memory, transcript=clip_transcript(st.recent), attempts=st.window,
                       best=memory_best(run), hints=st.hints, turn=st.turns,
                       model=spec.model if spec.model.configured else None, tokens_before=tokens_before)
    try:
        res: CompactResult = await workflow.execute_activity(
            names.COMPACT, inp, result_type=CompactResult,
            start_to_close_timeout=timedelta(seconds=spec.model.request_timeout_s + 60),
            heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout_s),
            retry_policy=RetryPolicy(maximum_attempts=3),
            summary=f"compact {len(st.recent)} messages and {len(st.window)} evaluations (turn {st.turns})")
        st.memory = res.memory
        st.window = []  # summarized; on failure they wait for the next compaction instead
        line = res.line()
    except ActivityError as err:  # a failed compaction never stops the run
        line = f"compaction failed ({short(str(err.cause or err), 200)}); kept the last {KEEP_TURNS} turns"
        st.window = st.window[-200:]  # bounded while compactions keep failing
    st.recent = tail_turns(st.recent, KEEP_TURNS, max_tokens=int(KEEP_FRACTION * run.context_budget()))
    st.calls_since_compaction = 0
    st.compactions += 1
    await run.notebook(line)
