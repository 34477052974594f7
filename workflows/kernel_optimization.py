"""KernelOptimization: the day-long optimization run as a deterministic Temporal workflow.

    target.start (prepare, profile the starting kernel) ─▶ loop until a budget is spent or a stop arrives:
        policy.step: llm: [compact?] ─▶ agent_turn (the model) ─▶ each tool call it makes, one activity each
                     tuner: the next untried configurations ─▶ write_kernel ─▶ profile_kernel
        continue-as-new when Temporal suggests it, every `continue_as_new_every` turns, or when the
        segment's history passes `max_history_bytes`, after every update handler has finished
    ─▶ policy.end ─▶ target.check_best ─▶ RunReport

This file is the run loop and the handlers' declarations. The layers it puts together, none importing
this one: workflows/run.py (the run's state and services), workflows/target.py (what is optimized:
a kernel), workflows/policy.py (what decides the next tool calls: llm_policy.py, tuner_policy.py),
workflows/dispatch.py (the tools, one activity per call), workflows/islands.py (agents as child
workflows) and workflows/control.py (what updates and signals may do). Every tool call is one
activity; its result is recorded in RunState, which is carried across continue-as-new, so the event
history is the run's log and crash recovery is Temporal's replay. Imports: pydantic models, activity
names and pure helpers only (never torch, triton or openai)."""
from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from workflows import limits, names
    from workflows.models import (AgentNews, Attempt, BestReport, Extension, RunReport, RunState, RunStatus,
                                  ToolCallRecord)

from workflows import control
from workflows.dispatch import ToolDispatch
from workflows.islands import Islands
from workflows.policy import policy_for
from workflows.run import Run
from workflows.target import KernelTarget, TaskTarget


def _prune(st: RunState, max_bytes: int) -> str | None:
    """Keep the state carried across continue-as-new under `max_bytes`: drop the oldest ledger entries (the
    history of earlier segments keeps them) and the evaluations of old attempts but their last.
    Deterministic: a function of the state alone. Returns the notebook's line, or None."""
    size = len(st.model_dump_json())
    if size <= max_bytes:
        return None
    keep_ledger = max(200, len(st.ledger) // 2)
    dropped = len(st.ledger) - keep_ledger
    if dropped > 0:
        st.ledger = st.ledger[dropped:]
        st.ledger_pruned += dropped
    best = st.best.attempt if st.best else None
    for a in st.attempts[: max(0, len(st.attempts) - 100)]:
        if len(a.evals) > 1 and a.n != best:
            a.evals = [a.best_eval() or a.evals[-1]]
    st.segment_histories = st.segment_histories[-200:]
    return (f"pruned the carried state from {size / 1e3:.0f} kB to {len(st.model_dump_json()) / 1e3:.0f} kB "
            f"({max(dropped, 0)} old ledger entries; earlier segments' histories keep them)")


@workflow.defn(name=names.WORKFLOW_TYPE)
class KernelOptimization:
    # The input arrives undecoded (a RawValue) and the update payloads as plain JSON (`Any`): the workflow
    # decodes and validates them itself (workflows/control.py), so an input the data converter cannot
    # read fails the run at once rather than its workflow task for ever. A RunSpec passed by a client
    # serializes to the same JSON.
    @workflow.init
    def __init__(self, spec: RawValue = None) -> None:  # type: ignore[assignment]  # None: no input given
        spec = control.parse_spec(spec)
        control.check_origin(spec)
        state = spec.carry or RunState(policy=spec.resolved_policy(), budget_hours=spec.budgets.hours,
                                       budget_tool_calls=spec.budgets.max_tool_calls,
                                       target_speedup=spec.budgets.target_speedup, hints=list(spec.hints),
                                       pending_hints=list(spec.hints))
        self.run = Run(spec.model_copy(update={"carry": None}), state)
        self.islands = Islands(self.run)
        self.tools = ToolDispatch(self.run, self.islands)
        self.target = (TaskTarget if spec.task is not None else KernelTarget)(self.run, self.tools)
        self.policy = policy_for(self.run, self.tools, self.islands)

    # ------------------------------------------------------------------------------------ run
    @workflow.run
    async def execute(self, spec: RawValue = None) -> RunReport:  # type: ignore[assignment]
        run = self.run
        st = run.state
        if st.setup is None:
            self.policy.begin(await self.target.start())
        run.upsert_search_attributes(force=True)
        if run.spec.agents > 1 and not st.stop_reason and not st.agents:
            await self.islands.run_agents(self.policy.agent_intro)
        while True:
            await run.wait_if_paused()
            reason = run.finished()
            if reason:
                st.stop_reason = reason
                break
            if self._continue_as_new_due():
                await self._continue_as_new()  # returns only where the carried state could not fit
                continue
            await self.policy.step()
            st.turns += 1
            run.turns_this_segment += 1
        await self.policy.end()
        if workflow.patched(names.PATCH_SWEEP_BEST):
            await self.target.check_best()
        run.step = "finished"
        await run.notebook(f"finished: {st.stop_reason}; {run.best_line()}; {st.tool_calls} tool calls, "
                           f"{len(st.attempts)} attempts, {st.segment} continue-as-new, {st.compactions} compactions")
        run.fault = None  # nothing is being retried any more, whatever a signal said
        run.upsert_search_attributes(force=True)
        run.details()
        return run.report()

    def _continue_as_new_due(self) -> bool:
        info, spec = workflow.info(), self.run.spec
        return (self.run.turns_this_segment >= spec.continue_as_new_every
                or info.is_continue_as_new_suggested()
                or info.get_current_history_size() >= spec.max_history_bytes)

    async def _continue_as_new(self) -> None:
        """Continue as new with the state so far; returns only where that state cannot be carried (past
        limits.MAX_CARRY_BYTES even pruned), the run's stop_reason saying so."""
        run = self.run
        st = run.state
        run.step = "continuing as new"
        await workflow.wait_condition(workflow.all_handlers_finished)
        info = workflow.info()
        size = info.get_current_history_size()
        st.segment += 1
        st.segment_histories.append(size)
        pruned = _prune(st, run.spec.max_state_bytes)
        if pruned:
            await run.notebook(pruned)
        await run.notebook(f"continue-as-new {st.segment}: segment of {info.get_current_history_length()} events, "
                           f"{size / 1e6:.2f} MB, after {run.turns_this_segment} turns; {st.tool_calls} tool calls so far")
        carried = run.spec.model_copy(update={"carry": st})
        size = len(carried.model_dump_json().encode())
        if size > limits.MAX_CARRY_BYTES and workflow.patched(names.PATCH_CARRY_BOUND):
            # a payload past Temporal's 2 MB would fail every later workflow task, the run Running for ever
            pruned = _prune(st, max(1, limits.MAX_CARRY_BYTES - (size - len(st.model_dump_json().encode()))))
            carried = run.spec.model_copy(update={"carry": st})
            size = len(carried.model_dump_json().encode())
            if size > limits.MAX_CARRY_BYTES:
                st.stop_reason = (f"the state to carry across continue-as-new is {size / 1e6:.2f} MB, past the "
                                  f"{limits.MAX_CARRY_BYTES / 1e6:.2f} MB a run may carry: the run ends here")
                return
            if pruned:
                await run.notebook(pruned)
        run.upsert_search_attributes(force=True)
        workflow.continue_as_new(carried, memo=run.memo())

    # ------------------------------------------------------------------------------- signals
    @workflow.signal(name=names.FAULT_SIGNAL)
    async def activity_fault(self, raw: Any) -> None:
        await control.fault(self.run, raw)

    @workflow.signal(name=names.AGENT_NEWS_SIGNAL)
    async def agent_news(self, raw: Any) -> None:
        news = control.parse_signal(AgentNews, raw, names.AGENT_NEWS_SIGNAL)
        if news is not None:
            await self.islands.on_news(news)

    # ------------------------------------------------------------------------------- queries
    @workflow.query
    def status(self) -> RunStatus:
        return self.run.status()

    @workflow.query
    def attempts(self) -> list[Attempt]:
        return self.run.state.attempts

    @workflow.query
    def best(self) -> BestReport | None:
        b = self.run.state.best
        return BestReport.of(b) if b is not None else None

    @workflow.query
    def ledger(self) -> list[ToolCallRecord]:
        return self.run.state.ledger

    # ------------------------------------------------------------------------------- updates
    @workflow.update
    def stop(self, reason: Any = "") -> str:
        return control.stop(self.run, reason)

    @stop.validator
    def _validate_stop(self, reason: Any = "") -> None:
        control.validate_stop(reason)

    @workflow.update
    def pause(self) -> str:
        self.run.set_paused(True)
        return f"paused after the current tool call ({self.run.state.tool_calls} done)"

    @workflow.update
    def resume(self) -> str:
        self.run.set_paused(False)
        return "running"

    @workflow.update
    def hint(self, text: Any) -> str:
        return control.hint(self.run, text)

    @hint.validator
    def _validate_hint(self, text: Any) -> None:
        control.validate_hint(self.run, text)

    @workflow.update
    def extend(self, ext: Any) -> RunStatus:
        self.run.extend(control.parse_update(Extension, ext, "extend"))
        return self.run.status()

    @extend.validator
    def _validate_extend(self, ext: Any) -> None:
        control.extension(self.run, ext)
