"""Summarizers: the run's history into a `Memory`.

- `deterministic_memory` builds the ledger part of the memory from the attempt digests alone (no
  model): failed approaches with their reason, measured strategies with their effect and verdict,
  tuner configurations tried and the winner. It is the fallback when the model fails, what the tuner
  writes, and the skeleton the model's summary is merged onto (`merge_ledger`), so a model that
  forgets an earlier failure cannot erase it.
- `summary_messages` + `RESPONSE_FORMAT` ask a model for a summary as structured output;
  `parse_model_memory` validates its answer and raises `CompactionOutputError` on garbage.

Pure: stdlib and pydantic only, no I/O, deterministic; safe in workflow code.

Caps. Each list has a cap (`CAPS`). When a list outgrows it, its oldest entries are merged into one
line at its head (text starting with `MERGED`, `merged` = how many entries it stands for) listing a
short label for each, oldest labels cut first when that line passes `MERGED_CHARS`: counted, never
dropped silently. The same failed approach seen again is one entry (`times` counts it).
"""
from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from compaction.memory import MERGED, AttemptDigest, BestKernel, Failure, Memory, Strategy
from compaction.prompt import goal_text, memory_block
from compaction.text import one_line as _one_line
from compaction.text import speedups_text
from kernels.labels import config_label

CAPS = {"strategies": 30, "failures": 40, "insights": 16, "hypotheses": 10}
MERGED_CHARS = {"strategies": 3000, "failures": 8000, "insights": 1500, "hypotheses": 800}
LABEL_CHARS = 64
FIELD_CHARS = 500  # one text field of a model-written entry
PLAN_CHARS = 2000
FAILED = ("compile_error", "incorrect", "rejected", "timeout", "crashed")
STAGE_RANK = {"write_kernel": 0, "edit_kernel": 0, "compile_kernel": 1, "compile": 1,
              "test_kernel": 2, "test": 2, "profile_kernel": 3, "profile": 3, "tuner": 3}
TUNER_PREFIX = "tuner:"


class CompactionOutputError(ValueError):
    """The model's summary is not a valid memory update."""


# ------------------------------------------------------------------------------------ helpers


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def _left_clip(text: str, limit: int) -> str:
    """Keep the end of a merged line: its oldest labels go first."""
    if len(text) <= limit:
        return text
    cut = text[len(text) - limit + 2:]
    i = cut.find("; ")
    return "…" + (cut[i + 1:] if 0 <= i < 200 else cut)


def _merged_count(line: str) -> int:
    m = re.match(re.escape(MERGED) + r" (\d+) ", line)
    return int(m.group(1)) if m else 0


def _strategy_label(s: Strategy) -> str:
    if s.merged:
        return s.effect
    tag = f"#{s.attempt} " if s.attempt is not None else ""
    return _one_line(f"{tag}{s.hypothesis} [{s.verdict}]", LABEL_CHARS)


def _failure_label(f: Failure) -> str:
    if f.merged:
        return f.why
    tag = f"#{f.attempt} " if f.attempt is not None else ""
    times = f" x{f.times}" if f.times > 1 else ""
    return _one_line(f"{tag}{f.approach}{times}", LABEL_CHARS)


def _cap_records(items: list, cap: int, label, limit: int, aggregate) -> list:
    """At most `cap` records: the oldest ones become one record, `aggregate(count, labels)`, whose
    count includes what earlier merges already held."""
    if len(items) <= cap:
        return items
    old, keep = items[: len(items) - cap + 1], items[len(items) - cap + 1:]
    n = sum(x.merged or 1 for x in old)
    labels = "; ".join(x for x in map(label, old) if x)
    return [aggregate(n, _left_clip(labels, limit))] + keep


def cap_strategies(items: list[Strategy], cap: int = CAPS["strategies"]) -> list[Strategy]:
    return _cap_records(items, cap, _strategy_label, MERGED_CHARS["strategies"], lambda n, labels: Strategy(
        hypothesis=f"{MERGED} {n} older strategies, oldest first:", effect=labels, verdict="merged", merged=n))


def cap_failures(items: list[Failure], cap: int = CAPS["failures"]) -> list[Failure]:
    return _cap_records(items, cap, _failure_label, MERGED_CHARS["failures"], lambda n, labels: Failure(
        approach=f"{MERGED} {n} older failed approaches, oldest first:", why=labels, merged=n))


def cap_texts(items: list[str], cap: int, noun: str, limit: int) -> list[str]:
    if len(items) <= cap:
        return items
    old, keep = items[: len(items) - cap + 1], items[len(items) - cap + 1:]
    n, labels = 0, []
    for line in old:
        k = _merged_count(line)
        if k:
            n += k
            labels.append(line.split(":", 1)[1].strip() if ":" in line else "")
        else:
            n += 1
            labels.append(_one_line(line, LABEL_CHARS))
    body = _left_clip("; ".join(x for x in labels if x), limit)
    return [f"{MERGED} {n} older {noun}: {body}"] + keep


def cap_memory(m: Memory) -> Memory:
    return m.model_copy(update={
        "strategies": cap_strategies(m.strategies),
        "failures": cap_failures(m.failures),
        "insights": cap_texts(m.insights, CAPS["insights"], "insights", MERGED_CHARS["insights"]),
        "hypotheses": cap_texts(m.hypotheses, CAPS["hypotheses"], "hypotheses", MERGED_CHARS["hypotheses"]),
    })


# ------------------------------------------------------------------------- deterministic ledger


def _is_generic(label: str) -> bool:
    return bool(re.fullmatch(r"attempt \d+", label.strip()))


def _label(ds: list[AttemptDigest]) -> tuple[str, str]:
    """(what was tried, the change) for one attempt's digests."""
    note = next((d.note for d in reversed(ds) if d.note and d.note.strip()), None)
    config = next((d.config for d in reversed(ds) if d.config), None)
    change = f"CONFIG = {{{config_label(config)}}}" if config else ""
    if note:
        return _one_line(note, FIELD_CHARS), change
    if config:
        return f"config {config_label(config)}", change
    return f"attempt {ds[0].attempt}", change


def _tuner_line(prev_line: str | None, configs: list[tuple[dict, float | None, int, str]]) -> str | None:
    """'tuner: N configurations evaluated; lowest latency so far {cfg} at X us (attempt n)'. Latency,
    not speedup: the line counts configurations; the memory's `best` (the workflow's, by speedup
    against the strongest baseline) is the one that ranks kernels, and the two can differ by the
    baselines' noise between evaluations."""
    if not configs and prev_line is None:
        return None
    count, win_lat, win_text = 0, None, ""
    if prev_line:
        m = re.match(r"tuner: (\d+) configurations evaluated", prev_line)
        count = int(m.group(1)) if m else 0
        # "fastest so far": the wording of memories written before 2026-12-02
        w = re.search(r"(?:lowest latency|fastest) so far (\{.*\}) at ([0-9.]+) us \(attempt (\d+)\)", prev_line)
        if w:
            win_lat, win_text = float(w.group(2)), f"{w.group(1)} at {w.group(2)} us (attempt {w.group(3)})"
    for cfg, lat, attempt, _status in configs:
        count += 1
        if lat is not None and (win_lat is None or lat < win_lat):
            win_lat, win_text = lat, f"{{{config_label(cfg)}}} at {lat:.1f} us (attempt {attempt})"
    failed = sum(1 for *_, st in configs if st in FAILED)
    tail = f"; lowest latency so far {win_text}" if win_text else "; none measured ok yet"
    extra = f"; {failed} of the latest {len(configs)} failed" if failed else ""
    return f"{TUNER_PREFIX} {count} configurations evaluated{tail}{extra}"


def deterministic_memory(prev: Memory, attempts: list[AttemptDigest], best: BestKernel | None,
                         hints: list[str], turn: int) -> Memory:
    """The memory from the previous memory and the attempts since, without a model.

    Pass the attempts since the last compaction; passing older ones again is harmless (an entry
    for an attempt number is replaced, never duplicated). `best` and `hints` are the workflow's and
    are copied as they are; the goal is the previous memory's."""
    m = prev.model_copy(deep=True)
    by_attempt: dict[int, list[AttemptDigest]] = {}
    for d in attempts:
        by_attempt.setdefault(d.attempt, []).append(d)
    numbers = sorted(by_attempt)

    running = None
    if prev.best is not None and prev.best.latency_us is not None and (not numbers or prev.best.attempt < numbers[0]):
        running = prev.best.latency_us
    tuner_configs: list[tuple[dict, float | None, int, str]] = []
    settled = ({s.attempt for s in prev.strategies if s.verdict != "untimed"}
               | {f.attempt for f in prev.failures}) - {None}  # counted by the tuner line already

    for n in numbers:
        ds = sorted(by_attempt[n], key=lambda d: STAGE_RANK.get(d.tool, 2))
        what, change = _label(ds)
        failed = next((d for d in ds if d.status in FAILED), None)
        config = next((d.config for d in reversed(ds) if d.config), None)
        top = max(ds, key=lambda d: (d.latency_us is not None, STAGE_RANK.get(d.tool, 2)))
        if config is not None and n not in settled and (failed is not None or top.latency_us is not None):
            tuner_configs.append((config, None if failed else top.latency_us, n, failed.status if failed else "ok"))

        if failed is not None:
            why = _one_line(f"{failed.status} at {failed.tool}: {failed.summary}" if failed.summary
                            else f"{failed.status} at {failed.tool}", FIELD_CHARS)
            old = next((s for s in m.strategies if s.attempt == n and not s.merged), None)
            m.strategies = [s for s in m.strategies if not (s.attempt == n and not s.merged)]
            if old is not None and _is_generic(what):
                what = old.hypothesis
            existing = next((f for f in m.failures if f.attempt == n and not f.merged), None)
            if existing is not None:  # this attempt was summarized before: update it in place
                i = m.failures.index(existing)
                m.failures[i] = existing.model_copy(update={
                    "why": why, "approach": existing.approach if _is_generic(what) else what})
                continue
            same = None if _is_generic(what) else next(
                (f for f in m.failures if not f.merged and _norm(f.approach) == _norm(what)), None)
            if same is not None:  # the same approach failed again: one entry, counted, moved to the end
                m.failures = [f for f in m.failures if f is not same]
                m.failures.append(Failure(approach=same.approach, why=why, attempt=n, times=same.times + 1))
            else:
                m.failures.append(Failure(approach=what, why=why, attempt=n))
            continue

        # ok at every stage it reached
        if top.latency_us is not None:
            lat = top.latency_us
            effect = f"{lat:.1f} us"
            if top.speedup:
                effect += f", {speedups_text(top.speedup)}"
            if running is not None:
                effect += f" (best before: {running:.1f} us)"
            if running is None or lat < running or (best is not None and best.attempt == n):
                verdict = "kept"
                if running is None or lat < running:
                    running = lat
                if top.summary:
                    m.insights = [i for i in m.insights if i != f"#{n} profile: {_one_line(top.summary, FIELD_CHARS)}"]
                    m.insights.append(f"#{n} profile: {_one_line(top.summary, FIELD_CHARS)}")
            else:
                verdict = "reverted"
        else:
            effect = _one_line(f"{top.status} at {top.tool}" + (f": {top.summary}" if top.summary else "")
                               + "; not profiled", FIELD_CHARS)
            verdict = "untimed"
        old = next((s for s in m.strategies if s.attempt == n and not s.merged), None)
        if old is not None:
            m.strategies = [s for s in m.strategies if s is not old]
            if _is_generic(what):
                what = old.hypothesis
            change = change or old.change
        m.failures = [f for f in m.failures if not (f.attempt == n and not f.merged)]
        m.strategies.append(Strategy(hypothesis=what, change=change, effect=effect, verdict=verdict, attempt=n))

    prev_tuner = next((i for i in m.insights if i.startswith(TUNER_PREFIX)), None)
    line = _tuner_line(prev_tuner, tuner_configs) if tuner_configs else prev_tuner
    if line is not None:
        m.insights = [i for i in m.insights if not i.startswith(TUNER_PREFIX)] + [line]

    m.best = best.model_copy() if best is not None else None
    m.hints = list(hints)
    m.goal = prev.goal.model_copy()
    m.compactions = prev.compactions + 1
    m.covers_through_turn = max(turn, prev.covers_through_turn)
    if not m.next_plan.strip():
        m.next_plan = ("Start from the best kernel; try the open hypotheses; do not repeat the failed approaches."
                       if best is not None else "Get a correct kernel first (compile, test), then profile it.")
    return cap_memory(m)


# --------------------------------------------------------------------------- model summaries


_STR = {"type": "string"}
_ATTEMPT = {"type": ["integer", "null"], "description": "the attempt number it refers to, or null"}
MEMORY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["strategies", "failures", "insights", "hypotheses", "next_plan"],
    "properties": {
        "strategies": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["hypothesis", "change", "effect", "verdict", "attempt"],
            "properties": {"hypothesis": _STR, "change": _STR,
                           "effect": {"type": "string", "description": "the measured effect, numbers from tool output"},
                           "verdict": {"type": "string", "description": "kept, reverted, failed, incorrect or untimed"},
                           "attempt": _ATTEMPT}}},
        "failures": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["approach", "why", "attempt"],
            "properties": {"approach": _STR, "why": _STR, "attempt": _ATTEMPT}}},
        "insights": {"type": "array", "items": _STR, "description": "what the profiler said that matters"},
        "hypotheses": {"type": "array", "items": _STR, "description": "open hypotheses worth testing"},
        "next_plan": {"type": "string"},
    },
}
RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {"name": "memory_update", "strict": True, "schema": MEMORY_SCHEMA},
}

SUMMARY_SYSTEM = f"""\
You maintain the working memory of a long, unattended GPU-kernel optimization run. Older turns of \
the run are about to be dropped from the agent's context; the memory you write is all that will \
remain of them. Update the previous memory with what the new turns show, and answer with one JSON \
object matching the schema (keys: strategies, failures, insights, hypotheses, next_plan).

Rules:
- Keep every failed approach from the previous memory, and add the new ones with the reason they \
failed (compile error, wrong answer, rejected, timeout, slower). A failed approach that is \
forgotten gets tried again.
- strategies: hypothesis → change → measured effect → verdict (kept, reverted, failed, incorrect, \
untimed), with the attempt number. Numbers only from tool outputs; never invent a measurement.
- insights: what the profiler said that matters (bound by memory or compute, occupancy, stalls, \
% of roofline). hypotheses: open ideas worth testing. next_plan: the next few steps.
- Be brief: one line an entry; at most {CAPS['strategies']} strategies, {CAPS['failures']} failures, \
{CAPS['insights']} insights, {CAPS['hypotheses']} hypotheses.
- The goal, the best kernel and the user's hints are kept by the system; do not restate them.

The shape of the answer (every key required; attempt is a number or null):
{{"strategies": [{{"hypothesis": "...", "change": "...", "effect": "...", "verdict": "kept", "attempt": 12}}], "failures": [{{"approach": "...", "why": "...", "attempt": 13}}], "insights": ["..."], "hypotheses": ["..."], "next_plan": "..."}}"""

TRANSCRIPT_CHARS = 60_000
TURN_CHARS = 1_500


def render_transcript(transcript: list[dict], limit: int = TRANSCRIPT_CHARS) -> str:
    """The transcript as readable text, long parts cut, oldest turns cut first past `limit`."""
    names: dict[str, str] = {}
    lines: list[str] = []
    for msg in transcript:
        role = msg.get("role", "?")
        content = msg.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
        content = str(content or "")
        if role == "tool":
            name = names.get(str(msg.get("tool_call_id")), "tool")
            lines.append(f"[{name} result] {_cut(content)}")
            continue
        if content.strip():
            lines.append(f"[{role}] {_cut(content)}")
        for tc in msg.get("tool_calls") or []:
            fn = tc.get("function") or {}
            names[str(tc.get("id"))] = str(fn.get("name") or "tool")
            lines.append(f"[{role} calls {fn.get('name')}] {_cut(str(fn.get('arguments') or ''))}")
    text = "\n".join(lines)
    if len(text) > limit:
        text = "[... earlier turns cut ...]\n" + text[len(text) - limit:]
    return text


def _cut(text: str, limit: int = TURN_CHARS) -> str:
    """At most `limit` characters, head and tail kept; a cut text is not cut again."""
    if len(text) <= limit:
        return text
    marker = f" [... {len(text)} characters, cut ...] "
    keep = max(limit - len(marker), 0)
    head = (keep * 2) // 3
    return text[:head] + marker + (text[len(text) - (keep - head):] if keep > head else "")


def clip_transcript(transcript: list[dict], per_part: int = TURN_CHARS, total: int = TRANSCRIPT_CHARS) -> list[dict]:
    """The transcript as the summarizer will read it: each content and each call's arguments cut to
    `per_part` characters, the oldest messages left out past `total`. Pass this, not the raw recent
    turns, as `CompactInput.transcript`: the summary reads the same, and the activity's input (kept
    in the workflow's history) stays small."""
    out: list[dict] = []
    size = 0
    for msg in reversed(transcript):
        m = dict(msg)
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
        if content is not None:
            m["content"] = _cut(str(content), per_part)
        if m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                fn = dict(tc.get("function") or {})
                fn["arguments"] = _cut(str(fn.get("arguments") or ""), per_part)
                calls.append(dict(tc, function=fn))
            m["tool_calls"] = calls
        size += len(str(m.get("content") or "")) + sum(len(tc["function"]["arguments"]) for tc in m.get("tool_calls") or [])
        if out and size > total:
            break
        out.append(m)
    out.reverse()
    return out


def _digest_line(d: AttemptDigest) -> str:
    bits = [f"#{d.attempt}", d.tool, d.status]
    if d.latency_us is not None:
        bits.append(f"{d.latency_us:.1f} us")
    if d.speedup:
        bits.append(speedups_text(d.speedup))
    if d.config:
        bits.append(f"config {{{config_label(d.config)}}}")
    line = " · ".join(bits)
    if d.summary:
        line += f" · {_one_line(d.summary, 300)}"
    if d.note:
        line += f" · note: {_one_line(d.note, 300)}"
    return "- " + line


def summary_messages(prev: Memory, transcript: list[dict],
                     attempts: list[AttemptDigest] | None = None) -> list[dict]:
    """Chat messages asking a model to update `prev` with the new turns (use with RESPONSE_FORMAT)."""
    parts = [goal_text(prev.goal), "", "# Previous memory", memory_block(prev)]
    if attempts:
        parts += ["", "# Attempts since the last compaction (measured by the evaluator; authoritative)"]
        parts += [_digest_line(d) for d in attempts]
    parts += ["", "# New turns of the run", render_transcript(transcript) or "(none)", "",
              "Answer with the updated memory as one JSON object."]
    return [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": "\n".join(parts)}]


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _ModelStrategy(_Loose):
    hypothesis: str
    change: str = ""
    effect: str = ""
    verdict: str = ""
    attempt: int | None = None


class _ModelFailure(_Loose):
    approach: str
    why: str = ""
    attempt: int | None = None


class _ModelUpdate(_Loose):
    strategies: list[_ModelStrategy]
    failures: list[_ModelFailure]
    insights: list[str]
    hypotheses: list[str]
    next_plan: str


def _json_object(text: str) -> Any:
    t = text.strip()
    fence = re.fullmatch(r"```[a-zA-Z0-9_-]*\s*(.*?)\s*```", t, flags=re.S)
    if fence:
        t = fence.group(1)
    try:
        return json.loads(t)
    except json.JSONDecodeError as first:
        i, j = t.find("{"), t.rfind("}")
        if 0 <= i < j:
            try:
                return json.loads(t[i: j + 1])
            except json.JSONDecodeError:
                pass
        raise CompactionOutputError(
            f"the model's summary is not JSON ({first.msg} at line {first.lineno} column {first.colno}); "
            f"it starts {text.strip()[:80]!r}") from None


def parse_model_memory(text: str | None, prev: Memory, best: BestKernel | None, hints: list[str],
                       turn: int | None = None) -> Memory:
    """The model's summary as a Memory. goal (from `prev`), best and hints are always the trusted
    values passed in, whatever the model wrote. Raises CompactionOutputError on garbage."""
    if text is None or not str(text).strip():
        raise CompactionOutputError("the model's summary is empty")
    data = _json_object(str(text))
    if not isinstance(data, dict):
        raise CompactionOutputError(f"the model's summary is JSON but not an object (a {type(data).__name__})")
    try:
        upd = _ModelUpdate.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()[:5])
        raise CompactionOutputError(f"the model's summary does not match the memory schema: {problems}") from None
    strategies = [Strategy(hypothesis=_one_line(s.hypothesis, FIELD_CHARS), change=_one_line(s.change, FIELD_CHARS),
                           effect=_one_line(s.effect, FIELD_CHARS), verdict=_one_line(s.verdict, 40), attempt=s.attempt)
                  for s in upd.strategies if s.hypothesis.strip() and not s.hypothesis.startswith(MERGED)]
    failures = [Failure(approach=_one_line(f.approach, FIELD_CHARS), why=_one_line(f.why, FIELD_CHARS), attempt=f.attempt)
                for f in upd.failures if f.approach.strip() and not f.approach.startswith(MERGED)]
    mem = Memory(
        goal=prev.goal.model_copy(),
        best=best.model_copy() if best is not None else None,
        strategies=strategies,
        failures=failures,
        insights=[_one_line(i, FIELD_CHARS) for i in upd.insights if i.strip() and not i.startswith(MERGED)],
        hypotheses=[_one_line(h, FIELD_CHARS) for h in upd.hypotheses if h.strip() and not h.startswith(MERGED)],
        next_plan=_one_line(upd.next_plan, PLAN_CHARS),
        hints=list(hints),
        compactions=prev.compactions + 1,
        covers_through_turn=max(turn if turn is not None else 0, prev.covers_through_turn),
    )
    return cap_memory(mem)


def merge_ledger(model: Memory, ledger: Memory) -> Memory:
    """The model's summary laid over the deterministic ledger. Every ledger entry survives: an entry
    the model also wrote (same attempt number) takes the model's wording and keeps the ledger's
    measurement and verdict; the model's other entries are added in attempt order. Profiler
    insights are the ledger's plus the model's new ones; hypotheses (the model may close them) and the
    plan are the model's, after the ledger's merged line."""
    by_n = {s.attempt: s for s in model.strategies if s.attempt is not None}
    strategies: list[Strategy] = []
    for s in ledger.strategies:
        ms = by_n.get(s.attempt) if s.attempt is not None and not s.merged else None
        if ms is not None:
            strategies.append(s.model_copy(update={"hypothesis": ms.hypothesis, "change": ms.change or s.change}))
        else:
            strategies.append(s)
    known = {_norm(s.hypothesis) for s in strategies}
    in_ledger = {x.attempt for x in ledger.strategies + ledger.failures if x.attempt is not None}
    extra = [s for s in model.strategies if s.attempt not in in_ledger and _norm(s.hypothesis) not in known]

    fby_n = {f.attempt: f for f in model.failures if f.attempt is not None}
    failures: list[Failure] = []
    fused: set[int] = set()
    for f in ledger.failures:
        mf = fby_n.get(f.attempt) if f.attempt is not None and not f.merged else None
        if mf is not None:
            fused.add(f.attempt)
            failures.append(f.model_copy(update={"approach": mf.approach}))
        else:
            failures.append(f)
    fknown = {_norm(f.approach) for f in failures}
    fextra = [f for f in model.failures if (f.attempt is None or f.attempt not in fused)
              and _norm(f.approach) not in fknown]

    def placed(base: list, more: list) -> list:
        out = list(base)
        for e in more:
            if e.attempt is None:
                out.append(e)
                continue
            i = len(out)
            while i > 0 and (out[i - 1].attempt is None or out[i - 1].attempt > e.attempt) and not out[i - 1].merged:
                i -= 1
            out.insert(i, e)
        return out

    insights = list(ledger.insights)  # what the profiler said stays, whatever the model forgot
    insights += [i for i in model.insights if i not in insights]
    tuner = [i for i in ledger.insights if i.startswith(TUNER_PREFIX)]
    insights = [i for i in insights if not i.startswith(TUNER_PREFIX)] + tuner
    hypotheses = [h for h in ledger.hypotheses if h.startswith(MERGED)] + model.hypotheses
    merged = ledger.model_copy(update={
        "strategies": placed(strategies, extra),
        "failures": placed(failures, fextra),
        "insights": insights,
        "hypotheses": hypotheses,
        "next_plan": model.next_plan or ledger.next_plan,
    })
    return cap_memory(merged)
