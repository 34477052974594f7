"""The run as every layer of the workflow sees it: its input and carried state, and the services they all
use: the clock and the budgets, pausing, the lab notebook, what the Web UI and `status` show, the
report, the activity options. Runs inside the workflow (deterministic: time is workflow.now())."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from compaction.text import one_line
    from reports.fmt import duration_us
    from workflows import limits, names
    from kernels.labels import config_label
    from workflows.models import (BestReport, Extension, Fault, NotebookEntry, RunReport, RunSpec, RunState,
                                  RunStatus)
    from workflows.yardstick import geomean_latency

LEDGER_SUMMARY_CHARS = 160
NOTEBOOK_LINES = 40
NOTEBOOK_LINE_CHARS = 2000
SEARCH_ATTRIBUTE_EVERY = 10  # tool calls between search-attribute upserts (a new best upserts at once)


def short(text: str, n: int = LEDGER_SUMMARY_CHARS) -> str:
    return one_line(text, n)


class Run:
    def __init__(self, spec: RunSpec, state: RunState) -> None:
        self.spec, self.state = spec, state
        self.step = "starting"  # what it is doing now, in words
        self.fault: Fault | None = None  # an activity failing now, retried by Temporal (FAULT_SIGNAL)
        self.turns_this_segment = 0
        self.fault_lines = 0  # notebook lines fault signals added in this run segment (control.FAULT_LINES)
        self._search_attributes_at = -1

    # ---------------------------------------------------------------------- time and budgets
    def hours_used(self) -> float:
        st = self.state
        if st.started_at is None:
            return 0.0
        now = workflow.now()
        paused = st.paused_s + ((now - st.paused_since).total_seconds() if st.paused and st.paused_since else 0.0)
        return max(0.0, ((now - st.started_at).total_seconds() - paused) / 3600.0)

    def finished(self) -> str | None:
        """Why the run ends now, or None."""
        st = self.state
        if st.stop_reason:
            return st.stop_reason
        if st.stop_requested:
            return f"stopped: {st.stop_requested}"
        if st.tool_calls >= st.budget_tool_calls:
            return f"tool-call budget spent ({st.tool_calls} of {st.budget_tool_calls})"
        if self.hours_used() >= st.budget_hours:
            return f"time budget spent ({self.hours_used():.2f} h of {st.budget_hours:g} h)"
        if st.target_speedup and st.best and (st.best.speedup or 0.0) >= st.target_speedup:
            return f"target reached: {st.best.speedup:.3f}x >= {st.target_speedup:g}x"
        if st.tuner.exhausted:
            return "search space exhausted"
        if st.idle_turns >= self.spec.max_idle_turns:
            return f"the model made no tool call in {st.idle_turns} turns in a row"
        return None

    def extend(self, ext: Extension) -> None:
        """Add to the budgets, never past their bounds."""
        st = self.state
        st.budget_hours = min(st.budget_hours + ext.hours, limits.MAX_HOURS)
        st.budget_tool_calls = min(st.budget_tool_calls + ext.tool_calls, limits.MAX_TOOL_CALLS)
        if ext.target_speedup is not None:
            st.target_speedup = ext.target_speedup

    def set_paused(self, paused: bool) -> None:
        st = self.state
        if paused and not st.paused:
            st.paused, st.paused_since = True, workflow.now()
        elif not paused and st.paused:
            if st.paused_since is not None:
                st.paused_s += (workflow.now() - st.paused_since).total_seconds()
            st.paused, st.paused_since = False, None

    async def wait_if_paused(self) -> None:
        """A pause takes effect between tool calls: the one running finishes, the next waits for resume."""
        st = self.state
        if st.paused and not st.stop_requested:
            before = self.step
            self.step = "paused"
            self.details()
            await workflow.wait_condition(lambda: not self.state.paused or bool(self.state.stop_requested))
            self.step = before

    # ---------------------------------------------------------------------------- activities
    def opts(self, summary: str, gpu: bool = False) -> dict[str, Any]:
        """execute_activity's options: a bookkeeping activity on the run's queue, or an evaluation on the GPU
        queue (its retries are infrastructure faults only: a bad kernel is a verdict)."""
        spec = self.spec
        if gpu:
            ev = spec.eval
            return dict(task_queue=spec.gpu_task_queue, start_to_close_timeout=timedelta(seconds=ev.timeout_s + 900),
                        heartbeat_timeout=timedelta(seconds=ev.heartbeat_timeout_s),
                        retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2),
                                                 maximum_interval=timedelta(seconds=60),
                                                 maximum_attempts=ev.max_attempts),
                        summary=summary)
        return dict(start_to_close_timeout=timedelta(seconds=spec.tool_timeout_s),
                    heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout_s),
                    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1),
                                             maximum_interval=timedelta(seconds=30), maximum_attempts=5),
                    summary=summary)

    def fault_over(self, activity: str) -> Fault | None:
        """The fault recorded for `activity`, now over (its call returned or failed for good)."""
        f = self.fault
        if f is None or f.activity != activity:
            return None
        self.fault = None
        return f

    async def recovered(self, activity: str) -> None:
        f = self.fault_over(activity)
        if f is not None:
            took = (workflow.now() - f.since).total_seconds()
            await self.notebook(f"{activity} recovered after {took:.0f} s and {f.attempt} failed "
                                f"attempt{'s' if f.attempt != 1 else ''} (last: {short(f.message, 200)})")

    # ------------------------------------------------------------------ what people see
    async def notebook(self, line: str) -> None:
        """A line of the lab notebook: in the state (status, Web UI) and, through a local activity whose
        summary is the line, in the notebook file and the Web UI's timeline."""
        st = self.state
        if len(line) > NOTEBOOK_LINE_CHARS:  # the notebook is carried across continue-as-new: bounded
            line = line[:NOTEBOOK_LINE_CHARS - 1] + "…"
        st.notebook = (st.notebook + [line])[-NOTEBOOK_LINES:]
        self.details()
        try:
            await workflow.execute_local_activity(
                names.NOTEBOOK, NotebookEntry(workflow_id=workflow.info().workflow_id, line=line),
                start_to_close_timeout=timedelta(seconds=10), retry_policy=RetryPolicy(maximum_attempts=3),
                summary=short(line, 200))
        except ActivityError:  # e.g. a full disk: the line stays in the state (status, Web UI); the run goes on
            pass

    def best_latency(self) -> float | None:
        b = self.state.best
        return geomean_latency(b.verdict) if b is not None else None

    def best_line(self) -> str:
        b = self.state.best
        if b is None:
            return "no ok kernel yet"
        if not b.verdict.timing_meaningful and self.best_latency() is not None:  # a CPU's: its speedup is noise
            return f"best attempt {b.attempt}, {duration_us(self.best_latency())} in the CPU's interpreter"
        return f"best attempt {b.attempt}" + (f" at {b.speedup:.3g}x" if b.speedup is not None else "")

    def context_budget(self) -> int:
        """The budget in estimated tokens: the input's, over what the server's count showed (token_scale)."""
        return int(self.spec.context_budget / self.state.token_scale)

    def ranked(self, speedup: float | None, timing_meaningful: bool) -> float | None:
        """The speedup the best and the tuner rank by: none where the times are a CPU interpreter's, whose
        speedup divides one noisy CPU time by another; they rank by the kernel's own interpreter time there."""
        if speedup is not None and not timing_meaningful and workflow.patched(names.PATCH_UNTIMED_RANKING):
            return None
        return speedup

    def best_ranked(self) -> float | None:
        b = self.state.best
        return self.ranked(b.speedup, b.verdict.timing_meaningful) if b is not None else None

    def context(self, n: int | None) -> str:
        """Where attempt `n` came from, for a notebook line: " (edit of 3; BLOCK_S=32)"."""
        a = self.state.attempt(n) if n is not None else None
        if a is None:
            return ""
        bits = [a.origin + (f" of {a.parent}" if a.parent is not None else "")]
        if a.config:
            bits.append(config_label(a.config))
        return " (" + "; ".join(bits) + ")"

    def details(self) -> None:
        st = self.state
        head = (f"**{self.spec.problem}** ({st.policy}): {self.step}. {st.tool_calls}/{st.budget_tool_calls} tool calls, "
                f"{self.hours_used():.2f}/{st.budget_hours:g} h, {self.best_line()}.")
        if self.fault is not None:
            head += f"\n\n**Failing:** {self.fault.line(workflow.now())}"
        workflow.set_current_details(head + "\n\n" + "\n".join(f"- {x}" for x in st.notebook[-15:]))

    def upsert_search_attributes(self, force: bool = False) -> None:
        st = self.state
        if not self.spec.search_attributes:
            return
        if not force and st.tool_calls - self._search_attributes_at < SEARCH_ATTRIBUTE_EVERY:
            return
        self._search_attributes_at = st.tool_calls
        updates = [names.SA_PROBLEM.value_set(self.spec.problem), names.SA_POLICY.value_set(st.policy),
                   names.SA_TOOL_CALLS.value_set(st.tool_calls)]
        if st.best is not None and st.best.speedup is not None:
            updates.append(names.SA_BEST_SPEEDUP.value_set(float(st.best.speedup)))
        workflow.upsert_search_attributes(updates)

    def status(self) -> RunStatus:
        st = self.state
        phase = ("finished" if self.step == "finished" else "paused" if st.paused and self.step == "paused"
                 else "pausing" if st.paused
                 else "stopping" if st.stop_requested else "starting" if st.setup is None else "running")
        return RunStatus(problem=self.spec.problem, policy=st.policy, phase=phase, step=self.step,
                         tool_calls=st.tool_calls, tool_calls_budget=st.budget_tool_calls, turns=st.turns,
                         hours_used=round(self.hours_used(), 4), hours_budget=st.budget_hours,
                         best_speedup=st.best.speedup if st.best else None,
                         best_attempt=st.best.attempt if st.best else None, attempts=len(st.attempts),
                         continue_as_new=st.segment, compactions=st.compactions, tokens=st.tokens,
                         notebook=st.notebook[-NOTEBOOK_LINES:], stop_reason=st.stop_reason, fault=self.fault)

    def report(self) -> RunReport:
        st = self.state
        return RunReport(workflow_id=workflow.info().workflow_id, problem=self.spec.problem, policy=st.policy,
                         stop_reason=st.stop_reason or "", tool_calls=st.tool_calls, turns=st.turns,
                         attempts=len(st.attempts), continue_as_new=st.segment, compactions=st.compactions,
                         hours=round(self.hours_used(), 4), tokens=st.tokens,
                         best=BestReport.of(st.best) if st.best is not None else None,
                         best_sweep=st.best_sweep, segment_history_bytes=st.segment_histories, ledger=st.attempts,
                         notes=st.notes, memory=st.memory, agents=st.agents).fitted(limits.MAX_REPORT_BYTES)

    def memo(self) -> dict[str, Any]:
        st = self.state
        return {"problem": self.spec.problem, "policy": st.policy, "segment": st.segment,
                "started_at": st.started_at.isoformat() if st.started_at else None,
                "best_speedup": st.best.speedup if st.best else None}
