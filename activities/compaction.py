"""The compaction activity: the transcript since the last compaction into an updated Memory.

The model summarizes (structured output, validated) and its summary is laid over the deterministic
ledger built from the attempt digests, so nothing the ledger knows is lost. If no model is
configured, or the model fails in any way (an exception, a 4xx/5xx, a timeout, text that is not
JSON, JSON that is not the schema), the memory is the deterministic ledger alone and
`fallback_reason` says why. A failed compaction never raises: the run goes on.

`compact_memory` is the plain function (tests inject `chat`); `compact` is the activity, sync like
the model activity (the worker runs it in its activity thread pool), on task queue `marathon`."""
from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, Field
from temporalio import activity

from activities.faults import heartbeating
from compaction.memory import AttemptDigest, BestKernel, Memory
from compaction.prompt import estimate_tokens, memory_block
from compaction.summarize import (RESPONSE_FORMAT, deterministic_memory, merge_ledger, parse_model_memory,
                                  summary_messages)
from workflows import names
from workflows.models import ModelSettings

SCHEMA_REFUSALS = ("HTTP400", "HTTP422")  # activities.model's error types for a refused request
ChatFn = Callable[..., dict]  # chat(settings, messages, tools=None, response_format=None) -> completion dict


class CompactInput(BaseModel):
    memory: Memory  # the previous memory (its goal is the run's, never rewritten)
    transcript: list[dict[str, Any]] = Field(default_factory=list)  # since the last compaction: clip_transcript(recent)
    attempts: list[AttemptDigest] = Field(default_factory=list)  # the attempts evaluated since then
    best: BestKernel | None = None  # the workflow's true best (only ok verdicts)
    hints: list[str] = Field(default_factory=list)  # the user's, all of them
    turn: int = 0  # the turn this memory covers through
    model: ModelSettings | None = None  # None or unconfigured: deterministic only
    tokens_before: int | None = None  # the caller's estimate of the prompt being compacted (estimate_prompt)


class CompactResult(BaseModel):
    memory: Memory
    used_model: bool
    fallback_reason: str | None = None
    tokens_before: int  # the prompt before: CompactInput.tokens_before, or memory + transcript estimated here
    tokens_after: int  # the new memory block
    prompt_tokens: int = 0  # the summarizing call's usage, when the endpoint reports it
    completion_tokens: int = 0

    def line(self) -> str:
        """One line for the Web UI / lab notebook: what the memory kept, and its size beside the prompt's
        (a tuner's first memory is larger than the empty prompt before it)."""
        m = self.memory
        how = "by the model" if self.used_model else f"deterministic: {self.fallback_reason}"

        def count(n: int, one: str, many: str) -> str:
            return f"{n} {one if n == 1 else many}"

        kept = [f"the best (attempt {m.best.attempt})" if m.best else "no best yet",
                count(sum(s.merged or 1 for s in m.strategies), "strategy", "strategies"),
                count(sum(f.merged or 1 for f in m.failures), "failure", "failures")]
        kept += [count(len(m.insights), "profiler insight", "profiler insights")] if m.insights else []
        kept += [count(len(m.hypotheses), "open hypothesis", "open hypotheses")] if m.hypotheses else []
        kept += ["the next plan"] if m.next_plan else []
        kept += [count(len(m.hints), "hint", "hints")] if m.hints else []
        return (f"compaction {m.compactions} through turn {m.covers_through_turn} ({how}): kept "
                f"{', '.join(kept[:-1])} and {kept[-1]} in a memory of {self.tokens_after:,} tokens "
                f"(the prompt before it: {self.tokens_before:,} tokens)")


def _content(completion: dict) -> str | None:
    if not isinstance(completion, dict):
        raise TypeError(f"the chat function returned a {type(completion).__name__}, not a dict")
    if "choices" in completion:
        choices = completion.get("choices") or []
        if not choices:
            raise ValueError("the completion has no choices")
        msg = choices[0].get("message") or {}
        if msg.get("refusal"):
            raise ValueError(f"the model refused: {str(msg['refusal'])[:200]}")
        return msg.get("content")
    if "message" in completion:
        return (completion["message"] or {}).get("content")
    return completion.get("content")


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:400]


def compact_memory(inp: CompactInput, chat: ChatFn | None = None) -> CompactResult:
    ledger = deterministic_memory(inp.memory, inp.attempts, inp.best, inp.hints, inp.turn)
    tokens_before = inp.tokens_before if inp.tokens_before is not None else estimate_tokens(
        [{"role": "user", "content": memory_block(inp.memory)}] + list(inp.transcript))

    def result(mem: Memory, used: bool, reason: str | None, usage: dict | None = None) -> CompactResult:
        usage = usage or {}
        return CompactResult(memory=mem, used_model=used, fallback_reason=reason, tokens_before=tokens_before,
                             tokens_after=estimate_tokens([{"role": "user", "content": memory_block(mem)}]),
                             prompt_tokens=int(usage.get("prompt_tokens") or 0),
                             completion_tokens=int(usage.get("completion_tokens") or 0))

    if inp.model is None or not inp.model.configured:
        return result(ledger, False, "no model configured")
    completion: dict | None = None
    try:
        if chat is None:
            from activities.model import chat_completion as chat  # openai lives in the worker only
        messages = summary_messages(inp.memory, inp.transcript, inp.attempts)
        try:
            completion = chat(inp.model, messages, response_format=RESPONSE_FORMAT)
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "type", None) not in SCHEMA_REFUSALS:
                raise
            # an endpoint without structured output (older vLLM, Ollama): ask once more, schema in words only
            completion = chat(inp.model, messages, response_format=None)
        text = _content(completion)
        model_mem = parse_model_memory(text, inp.memory, inp.best, inp.hints, turn=inp.turn)
        mem = merge_ledger(model_mem, ledger)
    except Exception as exc:  # noqa: BLE001 - any failure of the model means the deterministic memory
        usage = completion.get("usage") if isinstance(completion, dict) else None
        return result(ledger, False, _reason(exc), usage)
    return result(mem, True, None, completion.get("usage") if isinstance(completion, dict) else None)


@activity.defn(name=names.COMPACT)
def compact(inp: CompactInput) -> CompactResult:
    with heartbeating():  # a summary can take minutes; a lost worker's attempt is retried at once
        res = compact_memory(inp)
    activity.logger.info(res.line())
    return res
