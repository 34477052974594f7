"""Prompt assembly: [system: fixed instructions + goal block] + [memory] + [the last turns verbatim].

Pure and deterministic: stdlib and pydantic only, no I/O, no clocks, no randomness, so the workflow
may call it from workflow code.

Goal conditioning. `goal_block` is `goal_text(goal)` (worded once, from the run input; the same
characters at call 1 and call 1,000) followed by `figures_text(figures)` (the live figures, the only
part that changes). `strip_figures(block)` gives back the fixed part, which is what tests compare.

Token estimate (`estimate_tokens`): for each message, 4 tokens of overhead, plus 8 per tool call,
plus ceil(utf8_bytes / 3.5) over its text (content, name, tool_call_id, and each tool call's id,
function name and arguments); plus 3 for the reply's priming. 3.5 bytes a token over-estimates
English prose (about 4) and is about right for code, JSON and tracebacks with large vocabularies; small
ones count more tokens (`token_scale` corrects the budget with the server's own count); leave the model
some slack in `context_budget` for tool schemas and the reply, or pass `reserve`.

Sequence (`chat_sequence`): what strict chat templates accept: the system message first and only there,
user and assistant turns alternating (consecutive user messages are joined), a tool result only after
the assistant message that called it, no empty assistant message, every tool call's arguments a JSON
object (the servers parse them).

Budget (`build_messages`): never over `context_budget - reserve`. When the whole does not fit, in
this order: drop the oldest turns (an assistant message with tool_calls and its tool results are one
turn, never separated; the newest turn is kept), cut the longest tool outputs (head and tail kept),
trim the memory's lists oldest entry first (the block says how many were left out), cut the newest
turn's long texts, drop the newest turn. The system message and goal block are never cut: if they
alone do not fit, `PromptBudgetError`.
"""
from __future__ import annotations

import json
from typing import Any

from compaction.memory import MERGED, BestKernel, Failure, Goal, LiveFigures, Memory, Strategy
from compaction.text import one_line, speedups_text

CHARS_PER_TOKEN = 3.5
MESSAGE_OVERHEAD = 4
TOOL_CALL_OVERHEAD = 8
REPLY_PRIMING = 3
MIN_TOOL_CHARS = 400  # a tool output is never cut below this many characters by step 2
ENTRY_CHARS = 600  # one memory entry is rendered at most this long
MERGED_LINE_CHARS = 10_000  # a merged line (see compaction.summarize) at most this long

FIGURES_HEADER = "## Live figures"

# The candidate policy's allowlist in words (kernels/evaluator/policy.py; tests/kernels/evaluator/test_policy.py keeps the
# two in step).
RULES_SUMMARY = (
    "The evaluator accepts a candidate only within an allowlist: imports of torch, triton and "
    "triton.language, math, and named parts of functools, itertools, operator, typing and dataclasses; "
    "torch only to allocate, view, copy and cast tensors (and nn.Module/nn.Parameter for module "
    "problems); no str.format, match, global/nonlocal, yield, attributes starting with an underscore, "
    "getattr/setattr/eval/exec/open; triton.autotune and triton.Config without hooks (pre_hook, "
    "prune_configs_by, ...). "
    "A refused source gets a line naming what it used.")

DEFAULT_SYSTEM_PROMPT = """\
You are a GPU kernel engineer on a long, unattended optimization run. You improve one Triton kernel \
against a measured target, one tool call at a time, for up to a day and a thousand tool calls.

How to work:
- Implement the algorithm yourself in Triton. Importing third-party kernel libraries (flash-linear-\
attention, flash-attn, xformers, flashinfer) or computing the answer with torch operations is \
rejected.
- {rules}
- Only kernels with an `ok` verdict count. Compile, test for correctness, then profile.
- Every change is a hypothesis: say what you expect, change one thing, measure, and keep it only if \
the measurement says so.
- Read the memory below before acting. It is the compacted record of everything earlier in the run: \
do not repeat a failed approach unless you have a new reason, and build on what worked.
- Older turns are not shown; the memory and the goal block below are authoritative.""".format(rules=RULES_SUMMARY)


TASK_SYSTEM_PROMPT = """\
You are a software engineer on a long, unattended optimization run. You improve a project's files \
against one measured figure (a test suite's time, a bundle's size, a test's failure rate), one tool call \
at a time, for up to a day and a thousand tool calls.

How to work:
- A candidate is one text holding the files you change, each under its `### file: <path>` line. Only \
the files the task names may change; the guard (its tests) must keep passing, and must still run every check.
- Only candidates with an `ok` measurement count. Check the guard (check_guard), then measure \
(measure): each measurement runs yours and the task's own files in the same call.
- Every change is a hypothesis: say what you expect, change one thing, measure, and keep it only if \
the measurement says so. Gaming the figure (skipping work the guard checks, special-casing the \
measurement) is not an improvement.
- Read the memory below before acting. It is the compacted record of everything earlier in the run: \
do not repeat a failed approach unless you have a new reason, and build on what worked.
- Older turns are not shown; the memory and the goal block below are authoritative."""


class PromptBudgetError(ValueError):
    """The fixed part of the prompt (system instructions + goal block) does not fit the budget."""


# ---------------------------------------------------------------------------------------- goal


def goal_text(goal: Goal) -> str:
    """The goal block's fixed wording: a function of the run input only."""
    lines = [
        "# Goal (fixed for the whole run)",
        f"{'Task' if goal.kind == 'task' else 'Problem'}: {goal.problem}",
        f"Target: {goal.target or '(none given: as fast as possible while correct)'}",
        f"Baselines: {', '.join(goal.baselines) if goal.baselines else '(none)'}",
        f"Shapes: {goal.shapes or '(the problem default)'}",
        f"Device: {goal.device or '(the problem default)'}",
    ]
    if goal.statement.strip():
        lines += ["", "## Problem statement", goal.statement.strip()]
    return "\n".join(lines)


def _num(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def figures_text(figures: LiveFigures) -> str:
    """The live figures: the only part of the goal block that changes during a run."""
    f = figures
    if f.best_attempt is None and f.best_speedup is None and f.best_latency_us is None:
        best = "none yet (no kernel with an ok verdict)"
    else:
        parts = []
        if f.best_speedup is not None:
            parts.append(f"{f.best_speedup:.3g}x vs the strongest baseline")
        if f.best_latency_us is not None:
            parts.append(f"{_num(f.best_latency_us, 1)} us")
        if f.best_attempt is not None:
            parts.append(f"attempt {f.best_attempt}")
        best = ", ".join(parts)
    if f.tool_calls_budget > 0:
        left = max(f.tool_calls_budget - f.tool_calls_used, 0)
        calls = f"{f.tool_calls_used} used of {f.tool_calls_budget}, {left} left"
    else:
        calls = f"{f.tool_calls_used} used, no limit"
    if f.hours_budget > 0:
        left_h = max(f.hours_budget - f.hours_used, 0.0)
        hours = f"{_num(f.hours_used)} h used of {_num(f.hours_budget)} h, {_num(left_h)} h left"
    else:
        hours = f"{_num(f.hours_used)} h used, no limit"
    return "\n".join([FIGURES_HEADER, f"Best so far: {best}", f"Tool calls: {calls}", f"Time: {hours}"])


def goal_block(goal: Goal, figures: LiveFigures) -> str:
    return goal_text(goal) + "\n\n" + figures_text(figures)


def strip_figures(text: str) -> str:
    """The goal block (or a system message that ends with one) without its live figures."""
    head, sep, _ = text.rpartition("\n\n" + FIGURES_HEADER + "\n")
    return head if sep else text


# -------------------------------------------------------------------------------------- memory


def _clip(text: str, limit: int = ENTRY_CHARS) -> str:
    return one_line(text, limit)


def _strategy_line(s: Strategy) -> str:
    if s.merged:  # already capped by the summarizer
        return "- " + _clip(f"{s.hypothesis} {s.effect}".strip(), MERGED_LINE_CHARS)
    tag = f"#{s.attempt} " if s.attempt is not None else ""
    parts = [s.hypothesis]
    if s.change:
        parts.append(s.change)
    if s.effect:
        parts.append(s.effect)
    return "- " + _clip(f"{tag}[{s.verdict or '?'}] " + " → ".join(parts))


def _failure_line(f: Failure) -> str:
    if f.merged:
        return "- " + _clip(f"{f.approach} {f.why}".strip(), MERGED_LINE_CHARS)
    tag = f"#{f.attempt} " if f.attempt is not None else ""
    times = f" (failed {f.times}x)" if f.times > 1 else ""
    return "- " + _clip(f"{tag}{f.approach}{times}: {f.why}" if f.why else f"{tag}{f.approach}{times}")


def _text_line(text: str) -> str:
    return "- " + _clip(text, MERGED_LINE_CHARS if text.startswith(MERGED) else ENTRY_CHARS)


def _section(title: str, lines: list[str], omitted: int) -> list[str]:
    if not lines and not omitted:
        return []
    out = ["", title]
    if omitted:
        out.append(f"- ({omitted} older entries not shown here)")
    return out + lines


def _render_memory(m: Memory, omitted: dict[str, int]) -> str:
    out = [f"# Memory (compacted {m.compactions} times; covers the run through turn {m.covers_through_turn})"]
    out += ["", "## Best kernel (from the run's state)"]
    if m.best is None:
        out.append("- none yet")
    else:
        b = m.best
        bits = [f"attempt {b.attempt}"]
        if b.latency_us is not None:
            bits.append(f"{b.latency_us:.1f} us")
        if b.speedups:
            bits.append(speedups_text(b.speedups))
        if b.source_sha256:
            bits.append(f"sha256 {b.source_sha256[:12]}")
        out.append("- " + ", ".join(bits))
        if b.summary:
            out.append("- " + _clip(b.summary))
    out += _section("## Strategies tried (hypothesis → change → measured effect → verdict)",
                    [_strategy_line(s) for s in m.strategies], omitted.get("strategies", 0))
    out += _section("## Approaches that failed (do not repeat without a new reason)",
                    [_failure_line(f) for f in m.failures], omitted.get("failures", 0))
    out += _section("## Profiler insights", [_text_line(i) for i in m.insights], omitted.get("insights", 0))
    out += _section("## Open hypotheses", [_text_line(h) for h in m.hypotheses], omitted.get("hypotheses", 0))
    if m.next_plan.strip():
        out += ["", "## Next plan", _clip(m.next_plan, 4 * ENTRY_CHARS)]
    out += _section("## Hints from the user", ["- " + _clip(h) for h in m.hints], omitted.get("hints", 0))
    return "\n".join(out)


def memory_block(memory: Memory) -> str:
    return _render_memory(memory, {})


def with_best(memory: Memory, best: BestKernel | None) -> Memory:
    """The memory showing the workflow's best as of now (use it for every prompt; the stored memory
    keeps the best as of its compaction)."""
    return memory if memory.best == best else memory.model_copy(update={"best": best})


# -------------------------------------------------------------------------------------- tokens


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _utf8(s: str) -> int:
    return len(s.encode("utf-8", errors="replace"))


def message_tokens(message: dict) -> int:
    n = _utf8(_text_of(message.get("content"))) + _utf8(str(message.get("name") or ""))
    n += _utf8(str(message.get("tool_call_id") or ""))
    calls = message.get("tool_calls") or []
    for tc in calls:
        fn = tc.get("function") or {}
        n += _utf8(str(tc.get("id") or "")) + _utf8(str(fn.get("name") or "")) + _utf8(str(fn.get("arguments") or ""))
    return MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD * len(calls) + (2 * n + 6) // 7  # ceil(n / 3.5)


def estimate_tokens(messages: list[dict]) -> int:
    """A deterministic estimate of the prompt's tokens (see the module docstring)."""
    return REPLY_PRIMING + sum(message_tokens(m) for m in messages)


MAX_TOKEN_SCALE = 4.0  # a server counting more than this per estimated token is not believed further
SCALE_HEADROOM = 1.1  # the next prompt's mix (more code, less prose) may count this much more per estimate


def token_scale(previous: float, counted: int, estimated: int) -> float:
    """How many tokens the server counts per estimated one, from its count of a prompt: the most seen so
    far, with SCALE_HEADROOM once it counted more than estimated (never below 1, at most MAX_TOKEN_SCALE).
    Tokenizers differ: SmolLM2's makes 3.1 bytes a token of prose and 2.4 of Triton code, not 3.5, so an
    estimate-only budget let real prompts run over it. Dividing the budget by this scale keeps the next
    prompts within it by the server's count."""
    if counted <= estimated or estimated <= 0:
        return previous
    return min(MAX_TOKEN_SCALE, max(previous, counted / estimated * SCALE_HEADROOM))


def tools_tokens(tools: list[dict] | None) -> int:
    """The estimated tokens of the tool definitions sent with a request: pass it as `reserve` so the
    prompt and the tool schemas together stay within the budget."""
    return (2 * _utf8(json.dumps(tools, sort_keys=True)) + 6) // 7 if tools else 0


# --------------------------------------------------------------------------------------- turns


def group_turns(messages: list[dict]) -> list[list[dict]]:
    """Messages as turns: an assistant message with tool_calls and the tool results that follow it
    form one turn; any other message is a turn by itself. Tool results with no assistant message
    before them (orphans, e.g. after a cut) are dropped: no endpoint accepts them."""
    groups: list[list[dict]] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            if groups and groups[-1][0].get("role") == "assistant" and groups[-1][0].get("tool_calls"):
                groups[-1].append(m)
            continue
        groups.append([m])
    return groups


def tail_turns(messages: list[dict], turns: int, max_tokens: int | None = None) -> list[dict]:
    """The last `turns` turns (as `group_turns` counts them), never splitting a tool call from its
    results; with `max_tokens`, fewer when they would pass that estimate (the newest turn is always
    kept). What to keep verbatim after a compaction."""
    if turns <= 0:
        return []
    kept: list[list[dict]] = []
    used = 0
    for g in reversed(group_turns(messages)[-turns:]):
        size = sum(message_tokens(m) for m in g)
        if kept and max_tokens is not None and used + size > max_tokens:
            break
        kept.append(g)
        used += size
    return [m for g in reversed(kept) for m in g]


# -------------------------------------------------------------------------------------- budget


def _cut_middle(text: str, keep: int) -> str:
    if len(text) <= keep:
        return text
    cut = len(text) - keep
    marker = f"\n[... {cut} characters cut to fit the context budget ...]\n"
    head = max((keep * 2) // 3, 0)
    tail = max(keep - head, 0)
    return text[:head] + marker + (text[-tail:] if tail else "")


def _chars_for(tokens: int) -> int:
    return int(tokens * CHARS_PER_TOKEN) + 1


def build_messages(goal: Goal, figures: LiveFigures, memory: Memory, recent: list[dict],
                   context_budget: int, system_prompt: str | None = None, *, reserve: int = 0) -> list[dict]:
    """OpenAI chat messages for one model call, within `context_budget - reserve` estimated tokens."""
    budget = context_budget - reserve
    system = system_message(goal, figures, system_prompt)
    fixed = REPLY_PRIMING + message_tokens(system)
    if fixed > budget:
        raise PromptBudgetError(
            f"the system instructions and goal block alone take about {fixed} tokens, more than the budget of "
            f"{budget} (context_budget {context_budget} - reserve {reserve}); raise context_budget")

    groups = [[dict(m) for m in g] for g in group_turns(chat_sequence(recent))]
    omitted: dict[str, int] = {}
    mem = memory
    mem_msg = {"role": "user", "content": _render_memory(mem, omitted)}
    mem_tokens = message_tokens(mem_msg)
    group_tokens = [sum(message_tokens(m) for m in g) for g in groups]

    def total() -> int:
        return fixed + mem_tokens + sum(group_tokens)

    # 1. drop the oldest turns, keeping the newest
    while total() > budget and len(groups) > 1:
        groups.pop(0)
        group_tokens.pop(0)

    # 2. cut the longest tool outputs
    while total() > budget:
        tools = [(len(_text_of(m.get("content"))), gi, mi) for gi, g in enumerate(groups)
                 for mi, m in enumerate(g) if m.get("role") == "tool"]
        tools = [t for t in tools if t[0] > MIN_TOOL_CHARS + 80]
        if not tools:
            break
        length, gi, mi = max(tools, key=lambda t: (t[0], -t[1], -t[2]))
        keep = max(MIN_TOOL_CHARS, length - _chars_for(total() - budget) - 80)
        groups[gi][mi]["content"] = _cut_middle(_text_of(groups[gi][mi]["content"]), keep)
        group_tokens[gi] = sum(message_tokens(m) for m in groups[gi])

    # 3. trim the memory's lists, oldest entry first, from the longest list
    if total() > budget:
        mem = memory.model_copy(deep=True)
        order = ("strategies", "insights", "failures", "hypotheses")
        while total() > budget:
            sizes = [(len(getattr(mem, name)), -i, name) for i, name in enumerate(order)]
            n, _, name = max(sizes)
            if n == 0:
                if mem.hints:
                    name = "hints"
                elif mem.next_plan:
                    mem.next_plan = ""
                    mem_msg = {"role": "user", "content": _render_memory(mem, omitted)}
                    mem_tokens = message_tokens(mem_msg)
                    continue
                else:
                    break
            getattr(mem, name).pop(0)
            omitted[name] = omitted.get(name, 0) + 1
            mem_msg = {"role": "user", "content": _render_memory(mem, omitted)}
            mem_tokens = message_tokens(mem_msg)

    # 4. cut the newest turn's long texts (assistant/user content, tool outputs, call arguments)
    if total() > budget and groups:
        g = groups[-1]
        for m in sorted(g, key=lambda m: -message_tokens(m)):
            if total() <= budget:
                break
            text = _text_of(m.get("content"))
            if len(text) > 200:
                m["content"] = _cut_middle(text, max(200, len(text) - _chars_for(total() - budget) - 80))
            for tc in m.get("tool_calls") or []:
                args = str((tc.get("function") or {}).get("arguments") or "")
                if total() > budget and len(args) > 200:
                    tc["function"] = dict(tc["function"], arguments=json.dumps(
                        {"_truncated": f"{len(args)} characters of arguments not shown to fit the context budget"}))
            group_tokens[-1] = sum(message_tokens(x) for x in g)

    # 5. drop the newest turn
    if total() > budget and groups:
        groups.clear()
        group_tokens.clear()

    if total() > budget:
        raise PromptBudgetError(
            f"the prompt cannot be brought under {budget} tokens (system + goal {fixed}, memory {mem_tokens}); "
            "raise context_budget")
    return chat_sequence([system, mem_msg] + [m for g in groups for m in g])


EMPTY_REPLY = "(an empty reply)"
UNPARSED = "_unparsed_arguments"


def json_arguments(arguments: Any) -> str:
    """A tool call's arguments as a JSON object's text: as they came when they are one, else the text
    they came as under UNPARSED. Servers parse the arguments of the calls in a prompt (llama.cpp answers
    500 to a prompt holding a call cut off mid-JSON, on every retry)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    try:  # strict JSON: no NaN or Infinity, which Python reads and servers do not
        if isinstance(json.loads(text, parse_constant=_no_constant), dict):
            return text
    except ValueError:
        pass
    return json.dumps({UNPARSED: text})


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def chat_sequence(messages: list[dict]) -> list[dict]:
    """The messages as strict chat templates accept them (several reject anything else with a 400):
    consecutive user messages joined into one, an assistant message with neither text nor tool calls
    given a placeholder text, and tool call arguments that are no JSON object wrapped in one
    (`json_arguments`). None adds more than a few tokens."""
    out: list[dict] = []
    for m in messages:
        if m.get("role") == "assistant" and not _text_of(m.get("content")).strip() and not m.get("tool_calls"):
            m = dict(m, content=EMPTY_REPLY)
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [dict(c, function=dict(c.get("function") or {},
                                           arguments=json_arguments((c.get("function") or {}).get("arguments") or "{}")))
                     for c in m["tool_calls"]]
            if calls != m["tool_calls"]:
                m = dict(m, tool_calls=calls)
        if m.get("role") == "user" and out and out[-1].get("role") == "user":
            out[-1] = dict(out[-1], content=_text_of(out[-1].get("content")) + "\n\n" + _text_of(m.get("content")))
            continue
        out.append(m)
    return out


def system_message(goal: Goal, figures: LiveFigures, system_prompt: str | None = None) -> dict:
    default = TASK_SYSTEM_PROMPT if goal.kind == "task" else DEFAULT_SYSTEM_PROMPT
    return {"role": "system", "content": (system_prompt if system_prompt is not None else default)
            + "\n\n" + goal_block(goal, figures)}


def estimate_prompt(goal: Goal, figures: LiveFigures, memory: Memory, recent: list[dict],
                    system_prompt: str | None = None) -> int:
    """The estimated tokens of the whole prompt before any trimming: what `needs_compaction` compares
    with the budget."""
    return estimate_tokens([system_message(goal, figures, system_prompt),
                            {"role": "user", "content": memory_block(memory)}]
                           + [m for g in group_turns(recent) for m in g])


# ------------------------------------------------------------------------------------ triggers


def needs_compaction(tool_calls_since_last: int, compact_every: int, estimated_tokens: int,
                     context_budget: int, fraction: float = 0.7, min_calls: int = 4) -> bool:
    """Compact every `compact_every` tool calls (0 turns that off), and whenever the estimated prompt
    (`estimate_prompt`, before trimming) passes `fraction` of the budget, once at least `min_calls`
    tool calls have come since the last compaction: a compaction that would summarize one or two
    calls cannot shrink the prompt much, and `build_messages` keeps the prompt under budget anyway.
    Never right after a compaction."""
    if tool_calls_since_last <= 0:
        return False
    if compact_every > 0 and tool_calls_since_last >= compact_every:
        return True
    return (context_budget > 0 and estimated_tokens > fraction * context_budget
            and tool_calls_since_last >= min_calls)
