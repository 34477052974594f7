"""The run models, in one module the workflow, the activities, the workers and the CLI all import: the
run's input (`RunSpec`) and carried state (`RunState`) are defined here, their parts in
workflows/inputs.py (settings), workflows/records.py (state pieces, signals), workflows/outcome.py
(status, report) and workflows/activity_io.py (activity inputs and outputs), all importable from here.

Everything here crosses the Temporal boundary as JSON (temporalio.contrib.pydantic's converter), and
`RunSpec` is the workflow's input: a person can type it into `temporal workflow start --input`, e.g.

    {"problem": "mla_decode", "budgets": {"hours": 0.5, "max_tool_calls": 40}}

Pure pydantic: no torch, triton or openai, so the workflow sandbox can import it."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator, model_validator

from tasks.spec import TaskBundle

from compaction.memory import AttemptDigest, Memory
from workflows import limits as L
from workflows.activity_io import (EVAL_MODES, AgentTurnInput, AgentTurnResult, EditInput, EvalInput, EvalResult,
                                   ListInput, NotebookEntry, NoteInput, PrepareInput, RecordedVerdict, ShowInput,
                                   ToolResult, VerdictLookup, WriteInput, verdict_scope)
from workflows.inputs import (AgentRole, Budgets, EvalSettings, Extension, HeartbeatSeconds, ModelSettings, Name,
                              Policy, Seconds, SourceText, _Input, check_name, describe_invalid,
                              hint_refusal)
from workflows.outcome import BestReport, RunReport, RunStatus
from workflows.records import (AgentLine, AgentNews, Attempt, EvalDigest, Fault, RunBest, RunSetup, SourceRef,
                               TokenUsage, ToolCallRecord, TunerState, TunerTrial)

__all__ = [  # the parts, re-exported: one import for every model
    "EVAL_MODES", "AgentTurnInput", "AgentTurnResult", "EditInput", "EvalInput", "EvalResult", "ListInput",
    "NotebookEntry", "NoteInput", "PrepareInput", "RecordedVerdict", "ShowInput", "ToolResult", "VerdictLookup",
    "WriteInput", "verdict_scope", "AgentRole", "Budgets", "EvalSettings", "Extension", "ModelSettings", "Policy",
    "check_name", "describe_invalid", "BestReport", "RunReport", "RunStatus", "AgentLine", "AgentNews", "Attempt",
    "EvalDigest", "Fault", "RunBest", "RunSetup", "SourceRef", "TokenUsage", "ToolCallRecord", "TunerState",
    "TunerTrial", "RunSpec", "RunState",
]


class RunSpec(_Input):
    """The workflow input. Only `problem` is required. Nothing in it names a file on the worker: a
    problem and a kernel are shipped names, or travel as their text."""
    problem: Name  # a shipped problem's name; with `problem_source`, the file problem's name
    # a KernelBench-format problem file's source (kernels/problems/kernelbench.py): the problem travels by value,
    # so every evaluation, a resumed run and a scheduled one judge exactly what was submitted
    problem_source: SourceText | None = None
    # a shipped kernel of the problem; with `source`, the starting kernel's label (e.g. its file's name)
    kernel: Name = "starter"
    source: SourceText | None = None  # the starting kernel's source text
    policy: Policy | None = None  # None: `llm` when a model is configured, else `tuner`
    model: ModelSettings = Field(default_factory=ModelSettings)
    budgets: Budgets = Field(default_factory=Budgets)
    eval: EvalSettings = Field(default_factory=EvalSettings)
    # the user's hints, given at start
    hints: list[Annotated[str, Field(max_length=L.MAX_HINT_CHARS)]] = Field(default_factory=list, max_length=L.MAX_HINTS)
    memory: Memory | None = None  # start from an earlier run's memory (e.g. a tuner run's report)
    # compaction
    compact_every: int = Field(default=40, ge=1, le=L.MAX_TURNS)  # tool calls between compactions
    context_budget: int = Field(default=48000, ge=1, le=L.MAX_TOKENS)  # tokens a prompt may use
    # bounded history
    continue_as_new_every: int = Field(default=150, ge=1, le=L.MAX_TURNS)  # turns (model turns or tuner steps) per run segment
    # continue-as-new once a segment's history passes this
    max_history_bytes: int = Field(default=2_000_000, ge=1, le=L.MAX_HISTORY_BYTES)
    # at continue-as-new, older ledger entries and evaluations are pruned past this
    max_state_bytes: int = Field(default=800_000, ge=1, le=L.MAX_STATE_BYTES)
    inline_source_cap: int = Field(default=32768, ge=1, le=L.MAX_SOURCE_CHARS)  # larger sources travel as artifact keys
    # characters of a tool result in history; the rest in the artifact store
    tool_output_cap: int = Field(default=6000, ge=1, le=L.MAX_SOURCE_CHARS)
    max_source_bytes: int = Field(default=200_000, ge=1, le=L.MAX_SOURCE_CHARS)  # write_kernel refuses larger sources
    max_idle_turns: int = Field(default=5, ge=1, le=L.MAX_TURNS)  # consecutive model turns without a tool call that end the run
    # plumbing
    gpu_task_queue: Name = "marathon-gpu"
    tool_timeout_s: Seconds = 120.0
    # control activities (the model, the tools) heartbeat: one lost with its worker is retried after this
    heartbeat_timeout_s: HeartbeatSeconds = 5.0
    search_attributes: bool = True  # upsert MarathonProblem/Policy/BestSpeedup/ToolCalls
    # islands: agents > 1 runs that many agents as child workflows of this run, each with its own context
    # and memory and a share of the tool calls, sharing the best kernel and the failures through this run
    agents: int = Field(default=1, ge=1, le=L.MAX_AGENTS)
    # a task (tasks/spec.py: a folder with task.toml, carried by value: its spec and its text files) to
    # optimize instead of a kernel problem; `problem` is then the task's name
    task: TaskBundle | None = None
    # set by the parent on an agent's own spec: which agent it is. Leave it out.
    agent: AgentRole | None = None
    # set by the workflow when it continues as new: the run's state so far. Leave it out.
    carry: RunState | None = None

    @field_validator("problem")
    @classmethod
    def _problem_is_a_name(cls, value: str) -> str:
        return check_name(value, "a shipped problem's name, or a problem file's text in problem_source "
                                 "(the CLI reads a file for you)")

    @field_validator("hints")
    @classmethod
    def _hints_bounded(cls, value: list[str]) -> list[str]:
        refused = hint_refusal([], value)
        if refused:
            raise ValueError(refused)
        return value

    @field_validator("kernel")
    @classmethod
    def _kernel_is_a_name(cls, value: str) -> str:
        return check_name(value, "a shipped kernel's name, or a kernel's text in source (the CLI reads a file "
                                 "for you)")

    @field_validator("gpu_task_queue")
    @classmethod
    def _queue_is_a_name(cls, value: str) -> str:
        return check_name(value, "a task queue's name")

    def resolved_policy(self) -> Policy:
        if self.policy is not None:
            return self.policy
        return "llm" if self.model.configured else "tuner"

    @model_validator(mode="after")
    def _task_is_the_problem(self) -> RunSpec:
        if self.task is not None:
            if self.problem != self.task.spec.name:
                raise ValueError(f"problem: a task's run names its task ({self.task.spec.name!r}), not {self.problem!r}")
            if self.problem_source is not None or self.source is not None:
                raise ValueError("task: a task's run carries no problem_source or source (its files are in the task)")
        return self

    @model_validator(mode="after")
    def _agents_fed(self) -> RunSpec:
        """Every agent needs tool calls of its own: the start's profile takes one, then an LLM agent at
        least one and a tuner agent two (a write and a profile)."""
        if self.agents > 1 and self.carry is None:
            each = 2 if self.resolved_policy() == "tuner" else 1
            need = 1 + self.agents * each
            if self.budgets.max_tool_calls < need:
                raise ValueError(f"{self.agents} agents need at least {need} tool calls (1 for the starting kernel's "
                                 f"profile, then {each} per agent); the budget is {self.budgets.max_tool_calls}")
        return self


class RunState(BaseModel):
    """Everything a run carries across continue-as-new."""
    setup: RunSetup | None = None
    policy: Policy = "tuner"
    started_at: datetime | None = None
    paused_s: float = 0.0  # time spent paused does not count against the hours budget
    budget_hours: float = Field(default=24.0, ge=0, le=L.MAX_HOURS)
    budget_tool_calls: int = Field(default=1000, ge=0, le=L.MAX_TOOL_CALLS)
    target_speedup: float | None = Field(default=None, gt=0, le=L.MAX_SPEEDUP)
    tool_calls: int = 0
    turns: int = 0
    segment: int = 0  # continue-as-new hops so far
    segment_histories: list[int] = Field(default_factory=list)  # bytes of each finished segment
    attempts: list[Attempt] = Field(default_factory=list)
    current: int | None = None  # the attempt compile/test/profile act on
    current_source: SourceRef | None = None
    best: RunBest | None = None
    best_sweep: EvalDigest | None = None  # EvalSettings.sweep_best's verdict, once the run has finished
    ledger: list[ToolCallRecord] = Field(default_factory=list)
    ledger_pruned: int = 0  # the oldest ledger entries dropped to keep the carried state small
    notes: list[str] = Field(default_factory=list)
    hints: list[str] = Field(default_factory=list)
    pending_hints: list[str] = Field(default_factory=list)  # not yet shown to the model
    recent: list[dict[str, Any]] = Field(default_factory=list)  # openai messages since the last compaction
    memory: Memory | None = None  # the compacted memory (compaction/), its goal fixed at the start
    window: list[AttemptDigest] = Field(default_factory=list)  # evaluations since the last compaction
    compactions: int = 0
    calls_since_compaction: int = 0
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    token_scale: float = 1.0  # the server's prompt tokens per estimated token, the most seen (compaction.prompt)
    idle_turns: int = 0
    model_failures: int = 0
    tuner: TunerState = Field(default_factory=TunerState)
    notebook: list[str] = Field(default_factory=list)  # the last lines of the lab notebook
    paused: bool = False
    paused_since: datetime | None = None
    stop_requested: str | None = None
    stop_reason: str | None = None
    shared_best: AgentNews | None = None  # islands: another agent's best, not yet taken over
    shared_failures: list[str] = Field(default_factory=list)  # islands: other agents' failures, not yet shown
    agents: list[AgentLine] = Field(default_factory=list)  # islands, in the parent: each agent's outcome

    def attempt(self, n: int) -> Attempt | None:
        return self.attempts[n] if 0 <= n < len(self.attempts) else None


RunState.model_rebuild()
RunSpec.model_rebuild()
