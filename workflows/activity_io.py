"""The activities' inputs and outputs: what the workflow hands each activity, and what comes back."""
from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, Field

from kernels.evaluator.verdict import Verdict
from tasks.spec import TaskBundle
from workflows.inputs import EvalSettings, ModelSettings
from workflows.names import COMPILE_KERNEL, PROFILE_KERNEL, TEST_KERNEL
from workflows.records import Attempt, EvalDigest, SourceRef

EVAL_MODES = {COMPILE_KERNEL: "compile", TEST_KERNEL: "test", PROFILE_KERNEL: "full"}


class AgentTurnInput(BaseModel):
    settings: ModelSettings
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    turn_key: str = ""  # "<workflow id>/<turn>", sent as X-Marathon-Turn


class AgentTurnResult(BaseModel):
    message: dict[str, Any]  # the assistant message: role, content, tool_calls
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


class PrepareInput(BaseModel):
    problem: str
    problem_source: str | None = None
    task: TaskBundle | None = None  # a task instead of a kernel problem (its files are the start)
    kernel: str = "starter"
    source: str | None = None
    eval: EvalSettings = Field(default_factory=EvalSettings)
    inline_source_cap: int = 32768


class ToolResult(BaseModel):
    """What a tool hands back: `text` (capped) goes to the model, `artifact` keys the full text."""
    text: str
    ok: bool = True
    artifact: str | None = None
    source: SourceRef | None = None  # write/edit: the new candidate
    config: dict[str, Any] | None = None  # write/edit: its CONFIG, when it declares TUNABLES


class WriteInput(BaseModel):
    source: str
    attempt: int  # the number the new candidate will get
    entry_point: str
    inline_cap: int = 32768
    max_bytes: int = 200_000
    output_cap: int = 6000


class EditInput(BaseModel):
    current: SourceRef
    old: str
    new: str
    attempt: int
    entry_point: str
    inline_cap: int = 32768
    max_bytes: int = 200_000
    output_cap: int = 6000


class EvalInput(BaseModel):
    tool: str  # compile_kernel | test_kernel | profile_kernel
    problem: str
    problem_source: str | None = None
    task_key: str | None = None  # a task's bundle, by its key in the artifact store (RunSetup.task_key)
    attempt: int
    source: SourceRef
    settings: EvalSettings
    output_cap: int = 6000


class EvalResult(BaseModel):
    text: str
    verdict: Verdict
    digest: EvalDigest
    ncu: dict[str, Any] | None = None


class ShowInput(BaseModel):
    label: str
    source: SourceRef
    output_cap: int = 32768


class ListInput(BaseModel):
    attempts: list[Attempt]  # the most recent ones
    total: int
    best: int | None = None
    current: int | None = None
    output_cap: int = 6000


class NoteInput(BaseModel):
    workflow_id: str
    seq: int
    text: str
    output_cap: int = 6000


class NotebookEntry(BaseModel):
    workflow_id: str
    line: str


# ------------------------------------------------------------------------------ recorded verdicts
def verdict_scope(problem: str, problem_source: str | None, settings: EvalSettings, task_key: str | None = None) -> str:
    """What a verdict is comparable within: the problem (a file problem by its text, a task by its
    bundle's key) and the settings that decide what is judged (device, shapes, seeds, reps, baselines).
    The evaluation activity files an ok profile under it; a claimed best is looked up under the run's own."""
    key = {"problem": problem,
           "problem_source": hashlib.sha256(problem_source.encode()).hexdigest() if problem_source else None,
           "device": settings.device, "shapes": settings.shapes, "shape_list": settings.shape_list,
           "seeds": settings.seeds, "reps": settings.reps, "baselines": settings.baselines}
    if settings.dtype is not None:  # (absent otherwise: the scopes of runs without one stay as they were)
        key["dtype"] = settings.dtype
    if task_key is not None:
        key["task"] = task_key
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


class VerdictLookup(BaseModel):
    """FIND_VERDICT's input: the ok profiles of `source_sha256` that the evaluations of these workflows
    (the run and its agents) recorded under the run's scope."""
    workflow_ids: list[str]
    problem: str
    problem_source: str | None = None
    task_key: str | None = None
    settings: EvalSettings
    source_sha256: str
    inline_cap: int = 32768


class RecordedVerdict(BaseModel):
    """The best recorded verdict found for a source (None everywhere when there is none), with the source
    as the store holds it: nothing of the claim that asked is in it."""
    workflow_id: str | None = None  # whose evaluation recorded it
    source: SourceRef | None = None
    verdict: Verdict | None = None
    digest: EvalDigest | None = None
    config: dict[str, Any] | None = None  # the source's own CONFIG, when it declares TUNABLES
