"""The settings of a run as a person gives them (pydantic, validated at the door), the update payloads,
and the one-line description of a validation error. Every number is bounded (workflows/limits.py);
nothing here names a file on the worker."""
from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workflows import limits as L

Policy = Literal["llm", "tuner"]


# The constraints below are the one place the run's numbers are checked: the workflow refuses a spec
# that breaks one (failing at once, naming the field), and the CLI builds its spec through them too.
class _Input(BaseModel):
    # an infinite or NaN budget or timeout is a typo, and so is a field no model has: a misspelled
    # `budgets.hour` ignored would run for the default 24 hours
    model_config = ConfigDict(allow_inf_nan=False, extra="forbid")


# What names a problem, a kernel or a task queue: a name, never a path. A workflow input names a shipped
# problem or kernel, or carries a file's text (`problem_source`, `source`): the worker reads no file a
# workflow input names (the CLI reads the user's files and sends their text).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def check_name(value: str, carried_by: str) -> str:
    if not value:
        raise ValueError("a name is needed")
    if "/" in value or "\\" in value or value.startswith(("~", ".")) or not _NAME.fullmatch(value):
        raise ValueError(f"a name (letters, digits, _ . + -), not a path: {carried_by}")
    return value


Seconds = Annotated[float, Field(gt=0, le=L.MAX_TIMEOUT_S)]
HeartbeatSeconds = Annotated[float, Field(gt=0, le=L.MAX_HEARTBEAT_S)]
Name = Annotated[str, Field(max_length=L.MAX_NAME_CHARS)]
SourceText = Annotated[str, Field(max_length=L.MAX_SOURCE_CHARS)]
ShapeValue = Annotated[int, Field(ge=-L.MAX_DIMENSION, le=L.MAX_DIMENSION)]


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
    model: str = Field(default="", max_length=200)  # empty: no model configured (the run uses the tuner)
    base_url: str | None = Field(default=None, max_length=2000)  # any OpenAI-compatible endpoint; None: api.openai.com
    api_key_env: str = Field(default="OPENAI_API_KEY", pattern=r"^([A-Za-z_][A-Za-z0-9_]{0,127})?$")
    temperature: float | None = Field(default=None, ge=0, le=L.MAX_TEMPERATURE)
    max_tokens: int | None = Field(default=8192, ge=1, le=L.MAX_REPLY_TOKENS)  # one reply; a server generates up to it
    request_timeout_s: Seconds = 600.0  # one HTTP request; Temporal retries a timeout
    tool_choice: str = Field(default="auto", max_length=200)
    extra_body: dict[str, Any] = Field(default_factory=dict, max_length=64)  # vendor extras (vLLM, SGLang, ...)
    retry_initial_s: Seconds = 2.0  # Temporal's backoff for 408/409/429/5xx/timeouts
    retry_max_s: Seconds = 300.0  # (a retry-after header overrides the interval)

    @property
    def configured(self) -> bool:
        return bool(self.model)


class Budgets(_Input):
    hours: float = Field(default=24.0, gt=0, le=L.MAX_HOURS)
    max_tool_calls: int = Field(default=1000, ge=1, le=L.MAX_TOOL_CALLS)
    # stop once the best kernel reaches this speedup
    target_speedup: float | None = Field(default=None, gt=0, le=L.MAX_SPEEDUP)


class EvalSettings(_Input):
    device: Literal["auto", "cpu", "cuda"] = "auto"  # of the GPU worker
    shapes: Literal["smoke", "bench", "sweep"] | None = None  # smoke | bench | sweep; None: smoke on the CPU, bench on CUDA
    # explicit shapes instead of a set (a file problem's: the values given; its other constants may be 0
    # or negative, so each value is bounded here and checked by the problem)
    shape_list: list[dict[Name, ShapeValue]] = Field(default_factory=list, max_length=L.MAX_SHAPES)
    dtype: Literal["float32", "float16", "bfloat16"] | None = None  # the inputs'; None: the problem's
    timeout_s: Seconds = 600.0  # wall clock for one candidate's process
    seeds: int = Field(default=3, ge=1, le=L.MAX_SEEDS)
    reps: int | None = Field(default=None, ge=1, le=L.MAX_REPS)
    baselines: bool = True
    ncu: bool = True  # Nsight Compute metrics on profile_kernel, where the GPU worker has ncu (evaluation.ncu_path)
    # a dead GPU worker's evaluation moves elsewhere after this (the evaluator heartbeats every 2 s)
    heartbeat_timeout_s: HeartbeatSeconds = 10.0
    max_attempts: int = Field(default=3, ge=1, le=L.MAX_ATTEMPTS)  # infrastructure retries of one evaluation
    # tuner: configurations profiled at once. Set it to the number of GPU workers serving the run's
    # GPU queue (`marathon dev --gpus auto` starts one per GPU); each takes one evaluation at a time.
    parallel: int = Field(default=1, ge=1, le=L.MAX_PARALLEL)
    # after the run, the best kernel tested (correctness only) on the problem's sweep shapes by a CUDA
    # worker: the run's evaluations see their shapes and one random probe each
    sweep_best: bool = True


class AgentRole(BaseModel):
    """An island: agent `index` (1-based) of `of`, a child workflow of the run that shares through it."""
    index: int = Field(ge=1, le=L.MAX_AGENTS)
    of: int = Field(ge=2, le=L.MAX_AGENTS)


class Extension(_Input):
    """An `extend` update's payload: it adds to the budgets, never takes away (and never past the
    bounds: the `extend` update also refuses one that would take a total past them)."""
    hours: float = Field(default=0.0, ge=0, le=L.MAX_HOURS)
    tool_calls: int = Field(default=0, ge=0, le=L.MAX_TOOL_CALLS)
    target_speedup: float | None = Field(default=None, gt=0, le=L.MAX_SPEEDUP)


def hints_bytes(hints: list[str]) -> int:
    """The hints' size as JSON, ASCII-escaped: no smaller than any JSON encoding of them."""
    return sum(len(json.dumps(h)) for h in hints)


def hint_refusal(hints: list[str], more: list[str]) -> str | None:
    """Why `more` hints cannot join a run's `hints` (one line), or None: the count and the size of all of
    them together are bounded (limits.MAX_HINTS, MAX_HINTS_BYTES)."""
    n, size = len(hints) + len(more), hints_bytes(hints) + hints_bytes(more)
    if n > L.MAX_HINTS:
        return f"{n} hints in all, at most {L.MAX_HINTS}"
    if size > L.MAX_HINTS_BYTES:
        return f"the hints would take {size} bytes as JSON in all, at most {L.MAX_HINTS_BYTES}"
    return None
