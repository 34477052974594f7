"""What a person (or anything that can reach the server) tells a run: its input, the updates (stop,
pause, resume, hint, extend) and the signals (an activity's fault, an agent's news), each validated
here before it touches the run: a bad input fails the run at once naming the field, a bad update is
refused by its validator, a malformed signal is dropped. Runs inside the workflow; the handlers
themselves are declared on the workflow class (workflows/kernel_optimization.py) and call these."""
from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel, ValidationError

    from workflows import limits, names
    from workflows.inputs import hint_refusal
    from workflows.models import Extension, Fault, RunSpec, describe_invalid

from workflows.raw_input import decode_input

from workflows.run import Run


# ------------------------------------------------------------------------------------ payloads
def parse_spec(raw: Any) -> RunSpec:
    """The input (a RawValue, undecoded: decode_input), validated here rather than by the data converter:
    a converter's error fails only the workflow task, which Temporal retries for ever; this error fails
    the run at once, saying why."""
    value = decode_input(raw, "BadRunSpec", "run input")
    try:
        return RunSpec.model_validate(value)
    except ValidationError as err:
        raise ApplicationError(f"bad run input: {describe_invalid(err)}", type="BadRunSpec",
                               non_retryable=True) from None


def check_origin(spec: RunSpec, info: Any = None) -> None:
    """`carry` (the state so far) and `agent` are the workflow's own: set when a run continues as new, and
    on the agents a run starts. In a run anyone started they would be a state nobody judged (a best
    kernel, a verdict): refused, as a bad input is. So is an agent's workflow id (`<run>/agent-<i>`) on a
    workflow that run did not start: its evaluations would count as the run's own. `info`: the
    workflow's (workflow.info()), given here only by tests."""
    refused = origin_refusal(spec, workflow.info() if info is None else info)
    if refused:
        raise ApplicationError(f"bad run input: {refused}", type="BadRunSpec", non_retryable=True)


def origin_refusal(spec: RunSpec, info: Any) -> str | None:
    """Why `spec` cannot be this workflow's input, given its `info` (workflow.info()), or None.

    `agent` only on a child of the run its workflow id names (`<parent's id>/agent-<index>`): the one
    workflow that starts such children is KernelOptimization (islands.py), and a suite names its
    children `<suite>/<i>-<problem>`, never so (the parent's type is not in workflow.info()).

    `carry` only on the run's own continue-as-new, or on such an agent (its run hands it the state so
    far). A cron run or a retry also starts with the previous run's id (continued_run_id) but with the
    input it was first given, whoever wrote it; the SDK does not say who continued the run, so a run is
    taken as its own continuation only where it has no cron schedule and is its first attempt (a
    retry's attempt is above 1; a continue-as-new starts at 1). A parent alone is no proof: a suite
    starts its children with the input it was given."""
    agent_ok = False
    if spec.agent is not None:
        parent = info.parent
        if parent is None or info.workflow_id != names.agent_id(parent.workflow_id, spec.agent.index):
            return "agent: set by a run on the agents it starts (their ids name it); leave it out"
        agent_ok = True
    if spec.carry is not None:
        own = (info.continued_run_id is not None or agent_ok) and not info.cron_schedule and info.attempt == 1
        if not own:
            how = ("a cron run" if info.cron_schedule else f"attempt {info.attempt}" if info.attempt != 1
                   else "a child workflow" if info.parent is not None else "a run anyone started")
            return f"carry: set by the workflow itself when it continues as new, never on {how}; leave it out"
    root, sep, tail = info.workflow_id.rpartition(names.AGENT_ID_INFIX)
    if sep and tail.isdigit() and (info.parent is None or info.parent.workflow_id != root):
        # the evaluations recorded under an agent's id count as its run's own (workflows/evidence.py)
        return (f"workflow id: ...{names.AGENT_ID_INFIX}{tail} names an agent of run {root[:80]!r}; "
                "only that run starts it")
    return None


def parse_update(model: type[BaseModel], raw: Any, name: str) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ValueError(f"bad {name} payload: {describe_invalid(err)}") from None


def parse_signal(model: type[BaseModel], raw: Any, name: str) -> Any:
    """A signal's payload, validated as an update's is, or None: a malformed or oversized signal is
    dropped, with a warning in the worker's log."""
    try:
        size = len(json.dumps(raw, default=str))
    except (TypeError, ValueError):
        size = limits.MAX_SIGNAL_BYTES + 1
    if size > limits.MAX_SIGNAL_BYTES:
        workflow.logger.warning(f"dropped a {name} signal of {size} bytes (at most {limits.MAX_SIGNAL_BYTES})")
        return None
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        workflow.logger.warning(f"dropped a {name} signal: {describe_invalid(err)}")
        return None


def text_arg(raw: Any, name: str, limit: int) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"bad {name} payload: a string is needed (got {type(raw).__name__})")
    if len(raw) > limit:
        raise ValueError(f"bad {name} payload: {len(raw)} characters, at most {limit}")
    return raw


# ------------------------------------------------------------------------------------- updates
def stop(run: Run, reason: str) -> str:
    run.state.stop_requested = reason or "asked to stop"
    return f"stopping after the current tool call ({run.state.tool_calls} done)"


def validate_stop(reason: Any) -> None:
    text_arg(reason, "stop", limits.MAX_STOP_REASON_CHARS)


def hint(run: Run, text: str) -> str:
    st = run.state
    refused = hint_refusal(st.hints, [text])
    if refused:  # the validator refused it already; a handler never grows the state past the bound
        return f"hint not recorded: {refused}"
    st.hints.append(text)
    st.pending_hints.append(text)
    if st.memory is not None:
        st.memory.hints = list(st.hints)
    return f"hint {len(st.hints)} recorded; the model sees it on its next turn"


def validate_hint(run: Run, text: Any) -> None:
    if not text_arg(text, "hint", limits.MAX_HINT_CHARS).strip():
        raise ValueError("an empty hint")
    refused = hint_refusal(run.state.hints, [text])
    if refused:
        raise ValueError(f"bad hint payload: {refused}")


def extension(run: Run, raw: Any) -> Extension:
    """An `extend` payload: Extension's constraints (it adds, never takes away), and no total past its bound."""
    e: Extension = parse_update(Extension, raw, "extend")
    refused = extension_refusal(run, e)
    if refused:
        raise ValueError(f"bad extend payload: {refused}")
    return e


def extension_refusal(run: Run, e: Extension) -> str | None:
    """Why `e` cannot be added to the run's budgets (a total past its bound), or None. The `extend` update
    and an agent's `extend` news are held to it alike."""
    st = run.state
    if st.budget_hours + e.hours > limits.MAX_HOURS:
        return f"hours: the budget would be {st.budget_hours + e.hours:.6g} h, at most {limits.MAX_HOURS:g}"
    if st.budget_tool_calls + e.tool_calls > limits.MAX_TOOL_CALLS:
        return (f"tool_calls: the budget would be {st.budget_tool_calls + e.tool_calls}, "
                f"at most {limits.MAX_TOOL_CALLS}")
    return None


# ------------------------------------------------------------------------------------- signals
async def fault(run: Run, raw: Any) -> None:
    """An activity's attempt failed and Temporal retries it: show what fails and since when (until that
    activity's call ends, or the run does); the first failure of a streak goes into the notebook."""
    f = parse_signal(Fault, raw, names.FAULT_SIGNAL)
    if f is None:
        return
    refused = fault_refusal(run, f)
    if refused:
        workflow.logger.warning(f"dropped a {names.FAULT_SIGNAL} signal: {refused}")
        return
    cur = run.fault
    same = cur is not None and cur.activity == f.activity and cur.since == f.since
    if same and f.attempt <= cur.attempt:
        return
    run.fault = f
    run.details()
    if not same and run.fault_lines < FAULT_LINES:
        run.fault_lines += 1
        await run.notebook(f"{f.activity} failing: {f.message}; retrying")


FAULT_LINES = 20  # notebook lines faults may add in one run segment (status shows the latest regardless)
FAULT_SKEW_S = 300.0  # the clocks of the activity's worker and the server may disagree this much


def used_activities(run: Run) -> set[str]:
    """The activities whose faults a run hears of: those it schedules (the notebook is a local activity,
    which sends none)."""
    used = {names.PREPARE_RUN, *names.TOOL_NAMES}
    if run.state.policy == "llm":
        used |= {names.AGENT_TURN, names.COMPACT}
    if run.spec.agents > 1 or run.spec.agent is not None:
        used.add(names.FIND_VERDICT)
    return used


def fault_refusal(run: Run, f: Fault) -> str | None:
    """Why a fault signal is none of this run's (anyone may send one), or None: an activity the run does
    not use, or a `since` (the activity's first scheduling) outside this run segment's lifetime."""
    if f.activity not in used_activities(run):
        return f"{f.activity}: an activity this run does not use"
    if f.since.tzinfo is None:
        return "since: a time without its zone"
    start, now = workflow.info().workflow_start_time, workflow.now()
    if not (start - timedelta(seconds=FAULT_SKEW_S) <= f.since <= now + timedelta(seconds=FAULT_SKEW_S)):
        return f"since: {f.since.isoformat()} is outside this run's lifetime"
    return None
