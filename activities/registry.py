"""The @activity.defn wrappers, bound to one artifact store. Every activity is a sync function: the
worker runs them in a thread pool (blocking HTTP, blocking evaluator). The workflow refers to them by
name only (`workflows/names.py`).

Every activity runs under `_guarded`: a failure leaves as a short ApplicationError and, when Temporal will
retry it, as a Fault signal to the workflow (activities/faults.py); control activities heartbeat while
they run (evaluations heartbeat from the evaluator)."""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities import evaluation, model, tools
from activities.artifacts import ArtifactStore
from activities.faults import FaultReporter, application_error, heartbeating
from workflows import names
from workflows.models import (AgentTurnInput, AgentTurnResult, EditInput, EvalInput, EvalResult, ListInput,
                              NotebookEntry, NoteInput, PrepareInput, RecordedVerdict, RunSetup, ShowInput, ToolResult,
                              VerdictLookup, WriteInput)


class MarathonActivities:
    def __init__(self, store: ArtifactStore | None = None, client: Client | None = None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.store = store or ArtifactStore()
        self.faults = FaultReporter(client, loop)

    def _guarded(self, fn: Callable[..., Any], *args: Any, heartbeat: bool = True) -> Any:
        try:
            if not heartbeat:
                return fn(*args)
            with heartbeating():
                return fn(*args)
        except Exception as exc:
            err = application_error(exc)
            self.faults.report(err)
            raise err from None

    # ---- queue `marathon`: bookkeeping and the model
    @activity.defn(name=names.PREPARE_RUN)
    def prepare_run(self, inp: PrepareInput) -> RunSetup:
        return self._guarded(self._prepare, inp)

    def _prepare(self, inp: PrepareInput) -> RunSetup:
        try:
            return tools.prepare(inp, self.store)
        except (KeyError, FileNotFoundError, ValueError) as exc:  # a bad run spec: retrying cannot help
            raise ApplicationError(f"{type(exc).__name__}: {exc}", type="BadRunSpec", non_retryable=True) from None

    @activity.defn(name=names.WRITE_KERNEL)
    def write_kernel(self, inp: WriteInput) -> ToolResult:
        return self._guarded(tools.write_kernel, inp, self.store)

    @activity.defn(name=names.EDIT_KERNEL)
    def edit_kernel(self, inp: EditInput) -> ToolResult:
        return self._guarded(tools.edit_kernel, inp, self.store)

    @activity.defn(name=names.SHOW_KERNEL)
    def show_kernel(self, inp: ShowInput) -> ToolResult:
        return self._guarded(tools.show_kernel, inp, self.store)

    @activity.defn(name=names.LIST_ATTEMPTS)
    def list_attempts(self, inp: ListInput) -> ToolResult:
        return self._guarded(tools.list_attempts, inp, self.store)

    @activity.defn(name=names.NOTE)
    def note(self, inp: NoteInput) -> ToolResult:
        return self._guarded(tools.note, inp, self.store)

    @activity.defn(name=names.NOTEBOOK)
    def notebook(self, entry: NotebookEntry) -> None:
        """A lab-notebook line: run as a local activity whose summary is the line itself, so the Web UI
        timeline reads like the notebook, and appended to <artifacts>/notebooks/<workflow id>.md."""
        self._guarded(self.store.append_notebook, entry.workflow_id, entry.line, heartbeat=False)

    @activity.defn(name=names.FIND_VERDICT)
    def find_verdict(self, inp: VerdictLookup) -> RecordedVerdict:
        return self._guarded(evaluation.find_verdict, inp, self.store)

    @activity.defn(name=names.AGENT_TURN)
    def agent_turn(self, inp: AgentTurnInput) -> AgentTurnResult:
        return self._guarded(model.agent_turn_impl, inp)

    # ---- queue `marathon-gpu`: the evaluator
    def _evaluate(self, inp: EvalInput) -> EvalResult:
        return self._guarded(self._run_eval, inp, heartbeat=False)  # the evaluator heartbeats itself

    def _run_eval(self, inp: EvalInput) -> EvalResult:
        try:
            return evaluation.run_eval(inp, self.store, heartbeat=activity.heartbeat,
                                       recorded_by=activity.info().workflow_id)
        except evaluation.TaskFault as exc:  # the task's own files fail: the run ends, saying so
            raise ApplicationError(str(exc), type=names.TASK_BROKEN, non_retryable=True) from None
        except evaluation.ProblemFault as exc:  # the problem file's own code fails: the run ends, saying so
            raise ApplicationError(str(exc), type=names.PROBLEM_BROKEN, non_retryable=True) from None
        except (KeyError, ValueError) as exc:  # bad evaluation settings (a shape the problem refuses, ...)
            raise ApplicationError(f"{type(exc).__name__}: {exc}", type="BadEvalSettings", non_retryable=True) from None

    @activity.defn(name=names.COMPILE_KERNEL)
    def compile_kernel(self, inp: EvalInput) -> EvalResult:
        return self._evaluate(inp)

    @activity.defn(name=names.TEST_KERNEL)
    def test_kernel(self, inp: EvalInput) -> EvalResult:
        return self._evaluate(inp)

    @activity.defn(name=names.PROFILE_KERNEL)
    def profile_kernel(self, inp: EvalInput) -> EvalResult:
        return self._evaluate(inp)

    def control_activities(self) -> list:
        return [self.prepare_run, self.write_kernel, self.edit_kernel, self.show_kernel, self.list_attempts,
                self.note, self.notebook, self.agent_turn, self.find_verdict]

    def gpu_activities(self) -> list:
        return [self.compile_kernel, self.test_kernel, self.profile_kernel]
