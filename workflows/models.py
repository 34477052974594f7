"""The run models, in one module the workflow, the activities, the workers and the CLI all import.

Everything here crosses the Temporal boundary as JSON (temporalio.contrib.pydantic's converter), and
`RunSpec` is the workflow's input: a person can type it into `temporal workflow start --input`, e.g.

    {"problem": "mla_decode", "budgets": {"hours": 0.5, "max_tool_calls": 40}}

Pure pydantic: no torch, triton or openai, so the workflow sandbox can import it."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from compaction.memory import AttemptDigest, Memory
from kernels.evaluator.verdict import Verdict
from workflows.names import COMPILE_KERNEL, PROFILE_KERNEL, TEST_KERNEL

Policy = Literal["llm", "tuner"]
EVAL_MODES = {COMPILE_KERNEL: "compile", TEST_KERNEL: "test", PROFILE_KERNEL: "full"}


# ------------------------------------------------------------------------------------------ input
# The constraints below are the one place the run's numbers are checked: the workflow refuses a spec
# that breaks one (failing at once, naming the field), and the CLI builds its spec through them too.
class _Input(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)  # an infinite or NaN budget or timeout is a typo


def describe_invalid(err: ValidationError, prefix: str = "") -> str:
    """One line naming each bad field and what is wrong with it, e.g.
    `budgets.hours: Input should be greater than 0 (got -1)`."""
    parts = []
    for e in err.errors():
        where = prefix + ".".join(str(x) for x in e["loc"]) if e["loc"] else (prefix.rstrip(".") or "input")
        got = repr(e["input"])
        msg = e["msg"].removeprefix("Value error, ")  # a validator's own sentence
        got = f" (got {got[:60]})" if not isinstance(e["input"], dict) else ""
        parts.append((f"{where}: " if e["loc"] or prefix else "") + msg + got)
    return "; ".join(parts)


class ModelSettings(_Input):
    """Where the model lives. The key is never here: `api_key_env` names the environment variable of
    the worker process that holds it, read only inside the model activity."""
    model: str = ""  # empty: no model configured (the run uses the tuner)
    base_url: str | None = None  # any OpenAI-compatible endpoint; None: api.openai.com
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=8192, ge=1, le=1_000_000)  # one reply; a server generates up to it
    request_timeout_s: float = Field(default=600.0, gt=0)  # one HTTP request; Temporal retries a timeout
    tool_choice: str = "auto"
    extra_body: dict[str, Any] = Field(default_factory=dict)  # vendor extras (vLLM, SGLang, ...)
    retry_initial_s: float = Field(default=2.0, gt=0)  # Temporal's backoff for 408/409/429/5xx/timeouts
    retry_max_s: float = Field(default=300.0, gt=0)  # (a retry-after header overrides the interval)

    @property
    def configured(self) -> bool:
        return bool(self.model)


class Budgets(_Input):
    hours: float = Field(default=24.0, gt=0)
    max_tool_calls: int = Field(default=1000, ge=1)
    target_speedup: float | None = Field(default=None, gt=0)  # stop once the best kernel reaches this speedup


class EvalSettings(_Input):
    device: Literal["auto", "cpu", "cuda"] = "auto"  # of the GPU worker
    shapes: Literal["smoke", "bench", "sweep"] | None = None  # smoke | bench | sweep; None: smoke on the CPU, bench on CUDA
    shape_list: list[dict[str, int]] = Field(default_factory=list)  # explicit shapes instead of a set
    timeout_s: float = Field(default=600.0, gt=0)  # wall clock for one candidate's process
    seeds: int = Field(default=3, ge=1)
    reps: int | None = Field(default=None, ge=1)
    baselines: bool = True
    ncu: bool = True  # Nsight Compute metrics on profile_kernel, where the GPU worker has ncu (evaluation.ncu_path)
    # a dead GPU worker's evaluation moves elsewhere after this (the evaluator heartbeats every 2 s)
    heartbeat_timeout_s: float = Field(default=10.0, gt=0)
    max_attempts: int = Field(default=3, ge=1)  # infrastructure retries of one evaluation
    # tuner: configurations profiled at once. Set it to the number of GPU workers serving the run's
    # GPU queue (`marathon dev --gpus auto` starts one per GPU); each takes one evaluation at a time.
    parallel: int = Field(default=1, ge=1, le=64)
    # after the run, the best kernel tested (correctness only) on the problem's sweep shapes by a CUDA
    # worker: the run's evaluations see their shapes and one random probe each
    sweep_best: bool = True


class RunSpec(_Input):
    """The workflow input. Only `problem` is required."""
    problem: str
    # a KernelBench-format problem file's source (kernels/problems/kernelbench.py): the problem travels by value,
    # so every evaluation, a resumed run and a scheduled one judge exactly what was submitted
    problem_source: str | None = None
    kernel: str = "starter"  # a shipped kernel of the problem; ignored when `source` is given
    source: str | None = None  # inline starting source
    policy: Policy | None = None  # None: `llm` when a model is configured, else `tuner`
    model: ModelSettings = Field(default_factory=ModelSettings)
    budgets: Budgets = Field(default_factory=Budgets)
    eval: EvalSettings = Field(default_factory=EvalSettings)
    hints: list[str] = Field(default_factory=list)  # the user's hints, given at start
    memory: Memory | None = None  # start from an earlier run's memory (e.g. a tuner run's report)
    # compaction
    compact_every: int = Field(default=40, ge=1)  # tool calls between compactions
    context_budget: int = Field(default=48000, ge=1)  # tokens a prompt may use
    # bounded history
    continue_as_new_every: int = Field(default=150, ge=1)  # turns (model turns or tuner steps) per run segment
    max_history_bytes: int = Field(default=2_000_000, ge=1)  # continue-as-new once a segment's history passes this
    max_state_bytes: int = Field(default=800_000, ge=1)  # at continue-as-new, older ledger entries and evaluations are pruned past this
    inline_source_cap: int = Field(default=32768, ge=1)  # larger sources travel as artifact keys
    tool_output_cap: int = Field(default=6000, ge=1)  # characters of a tool result in history; the rest in the artifact store
    max_source_bytes: int = Field(default=200_000, ge=1)  # write_kernel refuses larger sources
    max_idle_turns: int = Field(default=5, ge=1)  # consecutive model turns without a tool call that end the run
    # plumbing
    gpu_task_queue: str = "marathon-gpu"
    tool_timeout_s: float = Field(default=120.0, gt=0)
    # control activities (the model, the tools) heartbeat: one lost with its worker is retried after this
    heartbeat_timeout_s: float = Field(default=5.0, gt=0)
    search_attributes: bool = True  # upsert MarathonProblem/Policy/BestSpeedup/ToolCalls
    # islands: agents > 1 runs that many agents as child workflows of this run, each with its own context
    # and memory and a share of the tool calls, sharing the best kernel and the failures through this run
    agents: int = Field(default=1, ge=1, le=64)
    # set by the parent on an agent's own spec: which agent it is. Leave it out.
    agent: AgentRole | None = None
    # set by the workflow when it continues as new: the run's state so far. Leave it out.
    carry: RunState | None = None

    def resolved_policy(self) -> Policy:
        if self.policy is not None:
            return self.policy
        return "llm" if self.model.configured else "tuner"

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


class AgentRole(BaseModel):
    """An island: agent `index` (1-based) of `of`, a child workflow of the run that shares through it."""
    index: int = Field(ge=1)
    of: int = Field(ge=2)


# ------------------------------------------------------------------------------------------ state
class SourceRef(BaseModel):
    """A kernel source: inline up to RunSpec.inline_source_cap, otherwise only its artifact key."""
    sha256: str
    text: str | None = None
    lines: int = 0


class EvalDigest(BaseModel):
    """One evaluation of an attempt, small enough to keep a thousand of."""
    tool: str
    mode: str
    status: str
    reason: str
    speedup: float | None = None  # Verdict.best_speedup(): worst shape against the strongest baseline
    baseline: str | None = None  # the baseline that speedup is against
    speedups: dict[str, float] = Field(default_factory=dict)  # per baseline, its worst shape
    latency_us: float | None = None  # geometric mean over shapes
    roofline_pct: float | None = None  # the lowest over shapes
    artifact: str | None = None  # the full verdict JSON in the artifact store
    tool_call: int = 0


class Attempt(BaseModel):
    """One candidate kernel: written, edited, configured by the tuner, or the starting kernel."""
    n: int
    origin: Literal["start", "write", "edit", "tuner", "shared"]  # shared: another agent's best, taken over
    parent: int | None = None
    sha256: str
    lines: int = 0
    config: dict[str, Any] | None = None  # its CONFIG, when it declares TUNABLES
    evals: list[EvalDigest] = Field(default_factory=list)
    tool_call: int = 0  # the tool call that created it

    @property
    def status(self) -> str:
        return self.evals[-1].status if self.evals else "unevaluated"

    def best_eval(self) -> EvalDigest | None:
        oks = [e for e in self.evals if e.status == "ok" and e.mode == "full"]
        return max(oks, key=lambda e: e.speedup or 0.0) if oks else None


class BestKernel(BaseModel):
    attempt: int
    source: SourceRef
    verdict: Verdict  # the full verdict, in `marathon eval --json` form
    speedup: float | None = None
    tool_call: int = 0


class ToolCallRecord(BaseModel):
    """The ledger of every tool call that completed, in order: seq is 1, 2, 3, ... with no gaps."""
    seq: int
    tool: str
    call_id: str = ""  # the model's tool_call id (or the tuner's)
    attempt: int | None = None
    ok: bool = True  # False: the tool answered with an error (bad arguments, edit not found, ...)
    summary: str = ""


class TokenUsage(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    max_prompt_tokens: int = 0


class TunerTrial(BaseModel):
    """One configuration the tuner wrote (and, unless writing failed, profiled)."""
    key: str  # canonical JSON of the config
    config: dict[str, Any]
    attempt: int | None = None
    status: str = "pending"  # a verdict status, "pending" (written, not yet profiled) or "write_failed"
    latency_us: float | None = None
    speedup: float | None = None


class TunerState(BaseModel):
    trials: list[TunerTrial] = Field(default_factory=list)
    exhausted: bool = False


class RunSetup(BaseModel):
    """What the prepare activity resolves once, at the start: the workflow never reads files."""
    problem: str
    entry_point: str
    statement: str
    kernel_label: str
    start: SourceRef
    device: str
    shape_set: str | None
    shapes: list[dict[str, int]]
    baselines: list[str]
    tunables: dict[str, list[Any]] | None = None
    config: dict[str, Any] | None = None


class RunState(BaseModel):
    """Everything a run carries across continue-as-new."""
    setup: RunSetup | None = None
    policy: Policy = "tuner"
    started_at: datetime | None = None
    paused_s: float = 0.0  # time spent paused does not count against the hours budget
    budget_hours: float = 24.0
    budget_tool_calls: int = 1000
    target_speedup: float | None = None
    tool_calls: int = 0
    turns: int = 0
    segment: int = 0  # continue-as-new hops so far
    segment_histories: list[int] = Field(default_factory=list)  # bytes of each finished segment
    attempts: list[Attempt] = Field(default_factory=list)
    current: int | None = None  # the attempt compile/test/profile act on
    current_source: SourceRef | None = None
    best: BestKernel | None = None
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


class Extension(_Input):
    """An `extend` update's payload: it adds to the budgets, never takes away."""
    hours: float = Field(default=0.0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    target_speedup: float | None = Field(default=None, gt=0)


class AgentNews(BaseModel):
    """What an agent tells the run (and the run its other agents): a new best kernel, a failure worth not
    repeating, or (from the run) a stop, a hint, a pause, a resume or an extension (its share)."""
    agent: int = 0  # 0: the run itself
    kind: Literal["best", "failure", "stop", "hint", "pause", "resume", "extend"]
    extension: Extension | None = None
    line: str = ""
    source: SourceRef | None = None
    verdict: Verdict | None = None
    speedup: float | None = None
    config: dict[str, Any] | None = None


class AgentLine(BaseModel):
    """One agent's line in the run's report."""
    agent: int
    workflow_id: str
    status: str  # its stop reason, or why it failed
    tool_calls: int = 0
    attempts: int = 0
    best_speedup: float | None = None
    best_attempt: int | None = None
    shared_taken: int = 0  # other agents' bests it took over


# ---------------------------------------------------------------------------------- control/report
RunState.model_rebuild()
RunSpec.model_rebuild()


class Fault(BaseModel):
    """An activity attempt that failed and will be retried: what failed, since when (the activity's
    first scheduling), how often so far. Activities send it (FAULT_SIGNAL); the workflow shows it."""
    activity: str
    attempt: int
    message: str
    since: datetime

    def line(self, now: datetime) -> str:
        return (f"{self.message.rstrip('.')} for {max(0.0, (now - self.since).total_seconds()):.0f} s "
                f"({self.activity}, {self.attempt} failed attempt{'s' if self.attempt != 1 else ''}); retrying")


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


# ------------------------------------------------------------------------ activity inputs / outputs
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
