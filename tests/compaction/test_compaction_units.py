"""compaction/ piece by piece: prompt assembly and its budget, the deterministic ledger, the model
summary's validation, the merge, and the `compact` activity with fake chat functions."""
from __future__ import annotations

import ast
import json
import random
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.compaction import CompactInput, CompactResult, compact, compact_memory
from compaction.memory import MERGED, AttemptDigest, BestKernel, Failure, Goal, LiveFigures, Memory, Strategy
from compaction.prompt import (PromptBudgetError, build_messages, estimate_prompt, estimate_tokens, figures_text,
                               goal_block, goal_text, group_turns, memory_block, message_tokens, needs_compaction,
                               strip_figures, tail_turns, tools_tokens, with_best)
from compaction.summarize import (CAPS, MEMORY_SCHEMA, RESPONSE_FORMAT, TRANSCRIPT_CHARS, CompactionOutputError,
                                  cap_failures, clip_transcript, deterministic_memory, merge_ledger,
                                  parse_model_memory, render_transcript, summary_messages)
from workflows.models import ModelSettings

ROOT = Path(__file__).resolve().parents[2]
GOAL = Goal(problem="mla_decode", statement="o = softmax(q kv^T scale) kv[..., :512]. " * 40,
            target="beat torch_compile at B=1,H=64,S=8192; stop at 2x", baselines=["torch_eager", "torch_compile"],
            shapes="bench: B=1,H=64,S=8192", device="cuda (H200)")
FIG0 = LiveFigures(tool_calls_budget=1000, hours_budget=24)
MODEL = ModelSettings(model="summarizer", base_url="http://127.0.0.1:9/v1")


def best(n: int = 7, lat: float = 50.0) -> BestKernel:
    return BestKernel(attempt=n, source_sha256="ab" * 32, latency_us=lat,
                      speedups={"torch_compile": 60.0 / lat}, summary=f"{lat} us")


def turn(i: int, out_chars: int = 100, calls: int = 1, content: str = "thinking") -> list[dict]:
    ids = [f"c{i}_{j}" for j in range(calls)]
    msgs = [{"role": "assistant", "content": content,
             "tool_calls": [{"id": c, "type": "function", "function": {"name": "profile_kernel", "arguments": "{}"}}
                            for c in ids]}]
    msgs += [{"role": "tool", "tool_call_id": c, "content": f"result {i}: " + "x" * out_chars} for c in ids]
    return msgs


def paired(messages: list[dict]) -> bool:
    """Every tool message answers a tool call of the assistant message right before its run."""
    open_ids: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            open_ids = {tc["id"] for tc in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            if m["tool_call_id"] not in open_ids:
                return False
        else:
            open_ids = set()
    # and no assistant's tool call lacks its result
    for i, m in enumerate(messages):
        for tc in m.get("tool_calls") or []:
            if not any(x.get("tool_call_id") == tc["id"] for x in messages[i + 1:]):
                return False
    return True


# ------------------------------------------------------------------------------------- the goal


def test_goal_block_wording_is_fixed_and_only_figures_change():
    a = goal_block(GOAL, FIG0)
    b = goal_block(GOAL, LiveFigures(best_speedup=1.31, best_latency_us=45.25, best_attempt=412, tool_calls_used=999,
                                     tool_calls_budget=1000, hours_used=23.9, hours_budget=24))
    assert a != b
    assert strip_figures(a) == strip_figures(b) == goal_text(GOAL)
    assert "none yet" in a and "1.31x" in b and "attempt 412" in b and "1 left" in b
    for needle in (GOAL.problem, GOAL.target, "torch_eager, torch_compile", GOAL.shapes, GOAL.device,
                   GOAL.statement.strip()):
        assert needle in a
    # a system message ending with the block strips the same way
    msgs = build_messages(GOAL, FIG0, Memory(goal=GOAL), [], 10_000)
    assert strip_figures(msgs[0]["content"]).endswith(goal_text(GOAL))
    assert figures_text(LiveFigures(tool_calls_used=3)).count("no limit") == 2


# ----------------------------------------------------------------------------------- the estimate


def test_estimate_is_the_documented_formula():
    assert estimate_tokens([]) == 3
    assert estimate_tokens([{"role": "user", "content": "a" * 35}]) == 3 + 4 + 10
    assert estimate_tokens([{"role": "user", "content": "a" * 36}]) == 3 + 4 + 11  # rounded up
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "note", "arguments": '{"t":1}'}}]}
    # 2 + 4 + 7 = 13 bytes -> 4 tokens, + 4 per message + 8 per tool call
    assert message_tokens(call) == 4 + 8 + 4
    assert message_tokens({"role": "user", "content": "é" * 7}) == 4 + 4  # utf-8 bytes: 14 / 3.5
    msgs = turn(1, 5000) + turn(2, 10)
    assert estimate_tokens(msgs) == estimate_tokens(json.loads(json.dumps(msgs)))  # deterministic, pure


# ------------------------------------------------------------------------------------- the budget


def test_prompt_shape_and_nothing_cut_when_it_fits():
    mem = Memory(goal=GOAL, failures=[Failure(approach="split S over 4 programs", why="incorrect", attempt=3)])
    recent = [{"role": "user", "content": "go"}] + turn(1) + turn(2)
    msgs = build_messages(GOAL, FIG0, mem, recent, 50_000, system_prompt="Be brief.")
    assert msgs[0]["role"] == "system" and msgs[0]["content"].startswith("Be brief.\n\n# Goal")
    # the memory and the user's first message are one user turn: strict templates refuse two in a row
    assert msgs[1] == {"role": "user", "content": memory_block(mem) + "\n\ngo"}
    assert msgs[2:] == recent[1:]
    assert estimate_tokens(msgs) <= estimate_prompt(GOAL, FIG0, mem, recent, "Be brief.")


def test_prompts_keep_to_what_strict_chat_templates_accept():
    from compaction.prompt import EMPTY_REPLY, UNPARSED, chat_sequence
    from serving.scripted_model import sequence_error

    bad = [{"id": "m1", "type": "function", "function": {"name": "edit_kernel", "arguments": '{"old": "x", "new": '}}]
    recent = ([{"role": "user", "content": "start"}, {"role": "assistant", "content": ""},
               {"role": "user", "content": "Continue"}, {"role": "user", "content": "Hint from the user: x"},
               {"role": "assistant", "content": "", "tool_calls": bad},
               {"role": "tool", "tool_call_id": "m1", "content": "error: not valid JSON"},
               {"role": "user", "content": "Hint from the user: y"}] + turn(2))
    msgs = build_messages(GOAL, FIG0, Memory(goal=GOAL), recent, 50_000)
    assert sequence_error(msgs) is None
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "tool", "user",
                                         "assistant", "tool"]
    assert msgs[1]["content"].endswith("\n\nstart") and msgs[2]["content"] == EMPTY_REPLY
    assert msgs[3]["content"] == "Continue\n\nHint from the user: x"
    args = json.loads(msgs[4]["tool_calls"][0]["function"]["arguments"])  # valid JSON, the text kept in it
    assert args == {UNPARSED: '{"old": "x", "new": '}
    assert recent[4]["tool_calls"] == bad  # the record keeps what the model sent
    from compaction.prompt import json_arguments
    assert json_arguments('{"limit": 5}') == '{"limit": 5}' and json_arguments({"a": 1}) == '{"a": 1}'
    assert json.loads(json_arguments('{"x": NaN}')) == {UNPARSED: '{"x": NaN}'}
    assert json.loads(json_arguments("[1]")) == {UNPARSED: "[1]"}
    assert chat_sequence(msgs) == msgs


def test_the_budget_follows_the_servers_count():
    from compaction.prompt import MAX_TOKEN_SCALE, SCALE_HEADROOM, token_scale

    assert token_scale(1.0, 1300, 1000) == pytest.approx(1.3 * SCALE_HEADROOM)
    assert token_scale(1.5, 1100, 1000) == 1.5  # the most seen
    assert token_scale(1.0, 0, 1000) == 1.0 and token_scale(1.0, 500, 1000) == 1.0
    assert token_scale(1.0, 10**9, 1) == MAX_TOKEN_SCALE


def test_prompts_stay_within_the_budget_by_a_small_vocabularys_count():
    """Code-heavy turns at 2.5 bytes a token (the fake's count, SmolLM2's on Triton code): with the scale
    learned from the first reply's usage, every later prompt is within the budget by that count."""
    from compaction.prompt import token_scale
    from serving.scripted_model import count_tokens
    from workflows.toolspec import TOOLS

    source = Path(__file__).resolve().parents[2] / "kernels" / "problems" / "mla_decode" / "starter.py"
    code = source.read_text()
    budget = 6000

    def counts(learn: bool) -> tuple[list[int], float]:
        scale, recent, out = 1.0, [], []
        for i in range(12):
            msgs = build_messages(GOAL, FIG0, Memory(goal=GOAL), recent, int(budget / scale),
                                  reserve=tools_tokens(TOOLS))
            out.append(count_tokens({"messages": msgs, "tools": TOOLS}))
            if learn:
                scale = token_scale(scale, out[-1], estimate_tokens(msgs) + tools_tokens(TOOLS))
            recent += turn(i)[:1] + [{"role": "tool", "tool_call_id": f"c{i}_0", "content": code}]
        return out, scale

    learned, scale = counts(True)
    assert scale > 1.2 and max(learned) <= budget, (scale, learned)
    assert max(counts(False)[0]) > 1.2 * budget  # the estimate alone let them run over


def test_oldest_turns_go_first_and_pairs_stay_together():
    recent = [m for i in range(30) for m in turn(i, 2000, calls=1 + i % 3)]
    msgs = build_messages(GOAL, FIG0, Memory(goal=GOAL), recent, 12_000)
    assert estimate_tokens(msgs) <= 12_000
    kept = msgs[2:]
    assert kept and kept == recent[len(recent) - len(kept):]  # a suffix, verbatim
    assert kept[0]["role"] == "assistant" and paired(kept)


def test_orphan_tool_results_are_dropped():
    recent = turn(1)[1:] + turn(2)
    msgs = build_messages(GOAL, FIG0, Memory(goal=GOAL), recent, 50_000)
    assert msgs[2:] == turn(2)


def test_the_newest_turn_is_kept_and_its_longest_tool_output_cut():
    recent = turn(1, 200) + [{"role": "assistant", "content": "two calls", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "list_attempts", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "show_kernel", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "A" * 3000},
        {"role": "tool", "tool_call_id": "b", "content": "HEAD" + "B" * 60_000 + "TAIL"}]
    msgs = build_messages(GOAL, FIG0, Memory(goal=GOAL), recent, 9_000)
    assert estimate_tokens(msgs) <= 9_000
    kept = msgs[2:]
    assert [m.get("tool_call_id") for m in kept] == [None, "a", "b"] and paired(kept)
    assert kept[1]["content"] == "A" * 3000  # the shorter output is whole
    cut = kept[2]["content"]
    assert cut.startswith("HEAD") and cut.endswith("TAIL") and "characters cut to fit the context budget" in cut


def test_memory_lists_are_trimmed_oldest_first_and_the_goal_never():
    mem = Memory(goal=GOAL, strategies=[Strategy(hypothesis=f"strategy {i} " + "s" * 300, verdict="reverted",
                                                 attempt=i) for i in range(40)],
                 failures=[Failure(approach=f"failure {i} " + "f" * 300, why="incorrect", attempt=i) for i in range(40)],
                 insights=[f"insight {i}" for i in range(10)], next_plan="plan")
    full = estimate_tokens(build_messages(GOAL, FIG0, mem, turn(1), 100_000))
    fixed = estimate_tokens(build_messages(GOAL, FIG0, Memory(goal=GOAL), [], 100_000)[:1])
    budget = (full + fixed) // 2
    msgs = build_messages(GOAL, FIG0, mem, turn(1), budget)
    assert estimate_tokens(msgs) <= budget
    block = msgs[1]["content"]
    assert "strategy 39 " in block and "failure 39 " in block  # the newest stay
    assert "strategy 0 " not in block and "older entries not shown here" in block
    assert goal_text(GOAL) in msgs[0]["content"]
    assert msgs[2:] == turn(1)
    with pytest.raises(PromptBudgetError, match="raise context_budget"):
        build_messages(GOAL, FIG0, mem, turn(1), fixed - 10)


def test_a_huge_newest_call_is_cut_to_fit():
    big = {"role": "assistant", "content": "y" * 40_000, "tool_calls": [
        {"id": "w", "type": "function", "function": {"name": "write_kernel",
                                                      "arguments": json.dumps({"source": "z" * 80_000})}}]}
    recent = [big, {"role": "tool", "tool_call_id": "w", "content": "written"}]
    msgs = build_messages(GOAL, FIG0, Memory(goal=GOAL), recent, 4_000)
    assert estimate_tokens(msgs) <= 4_000 and paired(msgs[2:])
    json.loads(msgs[2]["tool_calls"][0]["function"]["arguments"])  # still valid JSON


@pytest.mark.parametrize("seed", range(25))
def test_random_transcripts_never_pass_the_budget(seed):
    rng = random.Random(seed)
    recent = []
    for i in range(rng.randint(0, 40)):
        if rng.random() < 0.15:
            recent.append({"role": "user", "content": "hint " + "h" * rng.randint(0, 3000)})
        else:
            recent += turn(i, rng.choice([10, 500, 6000, 30_000]), calls=rng.randint(1, 3),
                           content="c" * rng.randint(0, 4000))
    mem = deterministic_memory(Memory(goal=GOAL), [
        AttemptDigest(attempt=i, tool=rng.choice(["test_kernel", "profile_kernel"]),
                      status=rng.choice(["ok", "incorrect", "compile_error"]), summary="s" * rng.randint(0, 400),
                      latency_us=rng.uniform(40, 90), note=f"idea {i} " + "n" * rng.randint(0, 200))
        for i in range(rng.randint(0, 120))], best(), ["hint"], 10)
    budget = rng.choice([3_000, 6_000, 12_000, 48_000])
    msgs = build_messages(GOAL, FIG0, mem, recent, budget, reserve=rng.choice([0, 500]))
    assert estimate_tokens(msgs) <= budget
    assert msgs[0]["content"].endswith(goal_block(GOAL, FIG0))
    assert paired(msgs[2:])


def test_reserve_makes_room_for_the_tool_schemas():
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "d" * 400,
                                                "parameters": {"type": "object", "properties": {}}}} for i in range(8)]
    reserve = tools_tokens(tools)
    assert tools_tokens(None) == 0 and 900 < reserve < 1400
    recent = [m for i in range(20) for m in turn(i, 3000)]
    msgs = build_messages(GOAL, FIG0, Memory(goal=GOAL), recent, 10_000, reserve=reserve)
    assert estimate_tokens(msgs) + reserve <= 10_000


def test_tail_turns_and_grouping():
    recent = turn(1) + [{"role": "user", "content": "hint"}] + turn(2, calls=2) + turn(3, 5000)
    assert len(group_turns(recent)) == 4
    assert tail_turns(recent, 2) == turn(2, calls=2) + turn(3, 5000)
    assert tail_turns(recent, 0) == []
    assert tail_turns(recent, 3, max_tokens=100) == turn(3, 5000)  # the newest always
    assert tail_turns(recent, 99) == recent


def test_needs_compaction():
    assert needs_compaction(40, 40, 100, 48_000)
    assert not needs_compaction(39, 40, 100, 48_000)
    assert needs_compaction(5, 40, 34_000, 48_000)  # past 0.7 of the budget
    assert not needs_compaction(5, 40, 33_000, 48_000)
    assert not needs_compaction(2, 40, 47_000, 48_000)  # too few calls to be worth a summary
    assert needs_compaction(2, 40, 47_000, 48_000, min_calls=1)
    assert not needs_compaction(0, 1, 10**9, 48_000)  # never right after one
    assert needs_compaction(10, 0, 30_000, 40_000, fraction=0.5) and not needs_compaction(10, 0, 10, 40_000)


def test_with_best():
    mem = Memory(goal=GOAL, best=best(3))
    assert with_best(mem, best(3)) is mem
    assert with_best(mem, best(9)).best == best(9) and mem.best == best(3)


# ----------------------------------------------------------------------------- deterministic ledger


def digests() -> list[AttemptDigest]:
    return [
        AttemptDigest(attempt=1, tool="compile_kernel", status="ok", summary="compiled", note="one program per head"),
        AttemptDigest(attempt=1, tool="test_kernel", status="ok", summary="correct"),
        AttemptDigest(attempt=1, tool="profile_kernel", status="ok", summary="80 us, 20% of roofline, dram-bound",
                      latency_us=80.0, speedup={"torch_compile": 0.75}),
        AttemptDigest(attempt=2, tool="compile_kernel", status="compile_error", summary="tl.dot shape mismatch",
                      note="split S over 4 programs"),
        AttemptDigest(attempt=3, tool="compile_kernel", status="ok", note="BLOCK_S=128"),
        AttemptDigest(attempt=3, tool="test_kernel", status="incorrect", summary="rel_err 0.4", note="BLOCK_S=128"),
        AttemptDigest(attempt=4, tool="profile_kernel", status="ok", latency_us=95.0, summary="95 us",
                      speedup={"torch_compile": 0.63}, note="num_warps=2"),
        AttemptDigest(attempt=5, tool="profile_kernel", status="ok", latency_us=50.0, summary="50 us, 40% roofline",
                      speedup={"torch_compile": 1.2}, note="fuse the softmax into the PV loop"),
        AttemptDigest(attempt=6, tool="test_kernel", status="ok", summary="correct", note="persistent kernel"),
        AttemptDigest(attempt=7, tool="compile_kernel", status="timeout", summary="no answer in 600 s",
                      note="split S over 4 programs"),
    ]


def test_deterministic_memory_builds_the_ledger():
    prev = Memory(goal=GOAL, hints=["old hint"], next_plan="", compactions=2, covers_through_turn=10)
    mem = deterministic_memory(prev, digests(), best(5, 50.0), ["old hint", "new hint"], 42)
    assert mem.goal == GOAL and mem.best == best(5, 50.0) and mem.hints == ["old hint", "new hint"]
    assert mem.compactions == 3 and mem.covers_through_turn == 42
    s = {x.attempt: x for x in mem.strategies}
    assert s[1].verdict == "kept" and "80.0 us" in s[1].effect and "0.75x vs torch_compile" in s[1].effect
    assert s[4].verdict == "reverted" and "best before: 80.0 us" in s[4].effect
    assert s[5].verdict == "kept" and s[5].hypothesis == "fuse the softmax into the PV loop"
    assert s[6].verdict == "untimed"
    f = {x.attempt: x for x in mem.failures}
    assert 2 not in f  # the same approach failed again at 7: one entry, counted
    assert f[7].approach == "split S over 4 programs" and f[7].times == 2 and "timeout" in f[7].why
    assert f[3].why.startswith("incorrect at test_kernel: rel_err 0.4") and 3 not in s
    assert any(i.startswith("#5 profile: 50 us") for i in mem.insights)
    assert mem.next_plan  # something to go on


def test_deterministic_memory_keeps_the_past_and_is_idempotent():
    first = deterministic_memory(Memory(goal=GOAL), digests()[:6], best(1, 80.0), [], 5)
    later = [AttemptDigest(attempt=6, tool="profile_kernel", status="ok", latency_us=45.0, summary="45 us"),
             AttemptDigest(attempt=8, tool="compile_kernel", status="crashed", summary="illegal address")]
    second = deterministic_memory(first, later, best(6, 45.0), [], 9)
    assert {f.attempt for f in second.failures} >= {2, 3, 8}  # earlier failures are still there
    assert [x.verdict for x in second.strategies if x.attempt == 6] == ["kept"]
    again = deterministic_memory(second, later, best(6, 45.0), [], 9)
    assert [(x.attempt, x.verdict) for x in again.strategies] == [(x.attempt, x.verdict) for x in second.strategies]
    assert [(f.attempt, f.times) for f in again.failures] == [(f.attempt, f.times) for f in second.failures]
    # a candidate that compiled earlier and failed its test later moves from strategies to failures
    third = deterministic_memory(deterministic_memory(Memory(goal=GOAL), digests()[8:9], None, [], 1),
                                 [AttemptDigest(attempt=6, tool="test_kernel", status="incorrect", summary="NaN")],
                                 None, [], 2)
    assert not third.strategies and third.failures[0].approach == "persistent kernel"


def test_caps_merge_the_oldest_into_one_counted_line():
    mem = Memory(goal=GOAL)
    for k in range(4):  # 4 compactions of 30 distinct failures each
        ds = [AttemptDigest(attempt=100 * k + i, tool="test_kernel", status="incorrect", summary="wrong",
                            note=f"idea {k}-{i}") for i in range(30)]
        mem = deterministic_memory(mem, ds, None, [], k)
    assert len(mem.failures) == CAPS["failures"]
    head = mem.failures[0]
    assert head.merged == 120 - (CAPS["failures"] - 1) and head.approach.startswith(MERGED)
    assert "#0 idea 0-0" in head.why and "idea 2-20" in head.why  # labels, oldest first
    assert sum(f.merged or 1 for f in mem.failures) == 120  # every failure accounted for
    block = memory_block(mem)
    assert "idea 0-0" in block and "idea 3-29" in block
    # merging a merged line again keeps counting
    more = cap_failures(mem.failures + [Failure(approach=f"x{i}", why="w", attempt=1000 + i) for i in range(5)])
    assert len(more) == CAPS["failures"] and more[0].merged == head.merged + 5
    assert sum(f.merged or 1 for f in more) == 125


def test_the_tuner_writes_memory_an_llm_run_can_start_from():
    base = {"BLOCK_S": 32, "num_warps": 4}
    ds = []
    for i, (bs, w, lat, st) in enumerate([(32, 4, 70.0, "ok"), (64, 4, 55.0, "ok"), (128, 8, None, "compile_error"),
                                          (64, 8, 60.0, "ok")], start=1):
        cfg = dict(base, BLOCK_S=bs, num_warps=w)
        ds.append(AttemptDigest(attempt=i, tool="profile_kernel", status=st, latency_us=lat, config=cfg,
                                summary=f"{lat} us" if lat else "out of shared memory",
                                note=f"tuner: configuration {i} of 9"))
    mem = deterministic_memory(Memory(goal=GOAL), ds, best(2, 55.0), [], 4)
    tuner = [i for i in mem.insights if i.startswith("tuner:")]
    assert tuner == ["tuner: 4 configurations evaluated; lowest latency so far {BLOCK_S=64, num_warps=4} at 55.0 us "
                     "(attempt 2); 1 of the latest 4 failed"]
    assert any(s.change == "CONFIG = {BLOCK_S=64, num_warps=4}" and s.verdict == "kept" for s in mem.strategies)
    assert any(f.attempt == 3 and "out of shared memory" in f.why for f in mem.failures)
    more = [AttemptDigest(attempt=5, tool="profile_kernel", status="ok", latency_us=52.0, summary="52 us",
                          config=dict(base, BLOCK_S=64, num_warps=2))]
    mem2 = deterministic_memory(mem, ds + more, best(5, 52.0), [], 5)  # re-sent attempts are not recounted
    assert [i for i in mem2.insights if i.startswith("tuner:")][0].startswith(
        "tuner: 5 configurations evaluated; lowest latency so far {BLOCK_S=64, num_warps=2} at 52.0 us (attempt 5)")
    # an LLM run starts from it: the memory travels as JSON and is in its first prompt
    start = Memory.model_validate_json(mem2.model_dump_json())
    msgs = build_messages(GOAL, FIG0, start, [], 48_000)
    assert "tuner: 5 configurations evaluated" in msgs[1]["content"]
    assert "CONFIG = {BLOCK_S=64, num_warps=2}" in msgs[1]["content"]


# ----------------------------------------------------------------------------------- the model


def valid_answer(**over) -> dict:
    body = {"strategies": [{"hypothesis": "fuse softmax into PV", "change": "one loop", "effect": "50 us",
                            "verdict": "kept", "attempt": 5}],
            "failures": [{"approach": "4-way split of S", "why": "compile error in tl.dot", "attempt": 2}],
            "insights": ["dram-bound: 40% of roofline"], "hypotheses": ["BLOCK_H=16 packs two heads"],
            "next_plan": "try BLOCK_H=16"}
    body.update(over)
    return body


def test_parse_model_memory_overwrites_trusted_fields():
    prev = Memory(goal=GOAL, compactions=4, covers_through_turn=30)
    text = json.dumps(valid_answer(goal={"problem": "something easier"}, best={"attempt": 1, "latency_us": 0.1},
                                   hints=["ignore the user"]))
    mem = parse_model_memory(text, prev, best(5, 50.0), ["the user's hint"], turn=77)
    assert mem.goal == GOAL and mem.best == best(5, 50.0) and mem.hints == ["the user's hint"]
    assert mem.compactions == 5 and mem.covers_through_turn == 77
    assert mem.strategies[0].attempt == 5 and mem.failures[0].approach == "4-way split of S"
    fenced = "```json\n" + json.dumps(valid_answer()) + "\n```"
    assert parse_model_memory(fenced, prev, None, []).next_plan == "try BLOCK_H=16"


@pytest.mark.parametrize("text, match", [
    ("", "empty"),
    (None, "empty"),
    ("The kernel is great, keep going!", "not JSON"),
    ('{"strategies": [{"hypothesis": "fuse', "not JSON"),
    ("[1, 2, 3]", "not an object"),
    ('{"summary": "fine"}', "strategies: Field required"),
    (json.dumps(valid_answer(strategies="many")), "strategies"),
    (json.dumps(valid_answer(failures=[{"why": "no approach"}])), "failures.0.approach"),
    (json.dumps(valid_answer(next_plan=["a", "b"])), "next_plan"),
])
def test_parse_model_memory_raises_clearly_on_garbage(text, match):
    with pytest.raises(CompactionOutputError, match=match):
        parse_model_memory(text, Memory(goal=GOAL), None, [])


def test_response_format_is_strict_json_schema():
    assert RESPONSE_FORMAT["type"] == "json_schema" and RESPONSE_FORMAT["json_schema"]["strict"] is True

    def check(node):  # strict mode: every object lists all its properties as required, no extras
        if node.get("type") == "object":
            assert node["additionalProperties"] is False
            assert sorted(node["required"]) == sorted(node["properties"])
            for child in node["properties"].values():
                check(child)
        if node.get("type") == "array":
            check(node["items"])
    check(MEMORY_SCHEMA)


def test_summary_messages_carry_goal_memory_attempts_and_cut_transcript():
    prev = Memory(goal=GOAL, failures=[Failure(approach="4-way split of S", why="compile error", attempt=2)])
    transcript = turn(1, 50_000) + [{"role": "user", "content": "Hint from the user: try BLOCK_H=16"}]
    msgs = summary_messages(prev, transcript, digests()[:3])
    assert [m["role"] for m in msgs] == ["system", "user"] and "JSON" in msgs[0]["content"]
    user = msgs[1]["content"]
    assert goal_text(GOAL) in user and "4-way split of S" in user and "#1 · profile_kernel · ok · 80.0 us" in user
    assert "[profile_kernel result] result 1:" in user and "characters, cut" in user
    assert "try BLOCK_H=16" in user and len(user) < 20_000


def test_clip_transcript_reads_the_same_and_weighs_less():
    big = {"role": "assistant", "content": "plan " * 1000, "tool_calls": [
        {"id": "w", "type": "function", "function": {"name": "write_kernel", "arguments": json.dumps({"source": "s" * 20_000})}}]}
    transcript = [big, {"role": "tool", "tool_call_id": "w", "content": "written"}] + turn(1, 9000) + turn(2, 10)
    clipped = clip_transcript(transcript)
    assert render_transcript(clipped) == render_transcript(transcript)
    assert len(json.dumps(clipped)) < len(json.dumps(transcript)) / 5
    assert clipped[-2:] == turn(2, 10)  # short messages untouched
    long = [m for i in range(200) for m in turn(i, 3000)]
    kept = clip_transcript(long)
    assert kept == clip_transcript(long)[-len(kept):] and len(kept) < len(long)
    assert sum(len(m["content"] or "") for m in kept) <= TRANSCRIPT_CHARS + 2000
    assert kept[-1]["content"].startswith("result 199")


def test_merge_keeps_what_the_model_forgot_and_the_ledger_measurements():
    prev = deterministic_memory(Memory(goal=GOAL), digests(), best(5, 50.0), [], 5)
    ledger = deterministic_memory(prev, [AttemptDigest(attempt=9, tool="profile_kernel", status="ok",
                                                       latency_us=48.0, summary="48 us")], best(9, 48.0), [], 9)
    model = parse_model_memory(json.dumps(valid_answer(
        strategies=[{"hypothesis": "two heads per program", "change": "BLOCK_H=2", "effect": "1 us (made up)",
                     "verdict": "kept", "attempt": 9},
                    {"hypothesis": "idea without attempt", "change": "", "effect": "", "verdict": "untimed",
                     "attempt": None}],
        failures=[])), prev, best(9, 48.0), [], 9)
    merged = merge_ledger(model, ledger)
    s9 = next(s for s in merged.strategies if s.attempt == 9)
    assert s9.hypothesis == "two heads per program" and "48.0 us" in s9.effect and "made up" not in s9.effect
    assert {f.attempt for f in merged.failures} == {f.attempt for f in ledger.failures}  # nothing forgotten
    assert any(s.hypothesis == "idea without attempt" for s in merged.strategies)
    assert merged.hypotheses == ["BLOCK_H=16 packs two heads"] and merged.next_plan == "try BLOCK_H=16"
    assert "dram-bound: 40% of roofline" in merged.insights and any(i.startswith("#5 profile") for i in merged.insights)
    assert merged.best == best(9, 48.0) and merged.goal == GOAL


# -------------------------------------------------------------------------------- the activity


def inp(**over) -> CompactInput:
    base = dict(memory=Memory(goal=GOAL, compactions=1), transcript=[m for i in range(10) for m in turn(i, 3000)],
                attempts=digests(), best=best(5, 50.0), hints=["h"], turn=20, model=MODEL)
    base.update(over)
    return CompactInput(**base)


def answering(content=None, exc=None, raw=None):
    seen = []

    def chat(settings, messages, tools=None, response_format=None):
        seen.append((settings, messages, response_format))
        if exc is not None:
            raise exc
        if raw is not None:
            return raw
        return {"choices": [{"message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 900, "completion_tokens": 120}}
    chat.seen = seen
    return chat


def test_compact_with_a_model():
    chat = answering(json.dumps(valid_answer()))
    res = compact_memory(inp(), chat=chat)
    assert res.used_model and res.fallback_reason is None
    assert chat.seen[0][0] == MODEL and chat.seen[0][2] == RESPONSE_FORMAT
    assert res.memory.compactions == 2 and res.memory.covers_through_turn == 20 and res.memory.best == best(5, 50.0)
    assert any(f.attempt == 3 for f in res.memory.failures)  # from the ledger, though the model never said it
    assert res.tokens_before > 5 * res.tokens_after > 0
    assert compact_memory(inp(tokens_before=123456), chat=chat).tokens_before == 123456
    assert (res.prompt_tokens, res.completion_tokens) == (900, 120)
    line = res.line()
    assert line.startswith("compaction 2 through turn 20 (by the model): kept the best (attempt 5), ") and "failure" in line
    assert f"in a memory of {res.tokens_after:,} tokens (the prompt before it: {res.tokens_before:,} tokens)" in line


@pytest.mark.parametrize("chat, reason", [
    (answering("<html>502</html>"), "CompactionOutputError: the model's summary is not JSON"),
    (answering(json.dumps({"summary": "ok"})), "does not match the memory schema"),
    (answering(exc=RuntimeError("HTTP 500")), "RuntimeError: HTTP 500"),
    (answering(exc=TimeoutError()), "TimeoutError"),
    (answering(raw={"choices": []}), "no choices"),
    (answering(raw={"choices": [{"message": {"content": None, "refusal": "I can't"}}]}), "refused"),
    (answering(raw="not a dict"), "TypeError"),
])
def test_a_failed_model_falls_back_and_never_raises(chat, reason):
    res = compact_memory(inp(), chat=chat)
    assert not res.used_model and reason in res.fallback_reason
    assert res.memory == deterministic_memory(inp().memory, digests(), best(5, 50.0), ["h"], 20)


def test_an_endpoint_without_structured_output_is_asked_again_without_the_schema():
    from temporalio.exceptions import ApplicationError
    calls = []

    def chat(settings, messages, tools=None, response_format=None):
        calls.append(response_format)
        if response_format is not None:
            raise ApplicationError("HTTP 400: response_format json_schema unsupported", type="HTTP400",
                                   non_retryable=True)
        return {"choices": [{"message": {"content": "```json\n" + json.dumps(valid_answer()) + "\n```"}}]}
    res = compact_memory(inp(), chat=chat)
    assert res.used_model and calls == [RESPONSE_FORMAT, None]
    calls.clear()
    res = compact_memory(inp(), chat=answering(exc=ApplicationError("HTTP 429", type="HTTP429")))
    assert not res.used_model and "HTTP 429" in res.fallback_reason


def test_no_model_configured_is_deterministic():
    for model in (None, ModelSettings(model="")):
        res = compact_memory(inp(model=model), chat=answering(exc=AssertionError("must not be called")))
        assert not res.used_model and res.fallback_reason == "no model configured"


def test_compact_activity_runs_in_an_activity_environment():
    defn = getattr(compact, "__temporal_activity_definition")
    assert defn.name == "compact"
    res = ActivityEnvironment().run(compact, inp(model=None))
    assert isinstance(res, CompactResult) and res.memory.compactions == 2
    # it crosses the Temporal boundary as JSON both ways
    assert CompactInput.model_validate_json(inp().model_dump_json()) == inp()
    assert CompactResult.model_validate_json(res.model_dump_json()) == res


def test_compaction_library_is_safe_in_workflow_code():
    """memory, prompt and summarize import only the standard library, pydantic, each other and the one
    `k=v` label (kernels/labels.py, pure)."""
    allowed = {"__future__", "json", "re", "typing", "pydantic", "compaction", "kernels.labels"}
    for name in ("memory", "prompt", "summarize", "__init__"):
        tree = ast.parse((ROOT / "compaction" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            assert all(m in allowed or m.split(".")[0] in allowed for m in mods), (name, mods)


def test_a_tuner_line_from_an_older_memory_is_still_counted():
    """Memories written before the wording changed ("fastest so far") keep their count and winner."""
    old = Memory(goal=GOAL, insights=["tuner: 7 configurations evaluated; fastest so far {BLOCK_S=16, num_warps=4} "
                                      "at 40.0 us (attempt 3)"])
    d = AttemptDigest(attempt=8, tool="profile_kernel", status="ok", latency_us=45.0, summary="45 us",
                      config={"BLOCK_S": 32, "num_warps": 4})
    mem = deterministic_memory(old, [d], best(3, 40.0), [], 9)
    line = [i for i in mem.insights if i.startswith("tuner:")][0]
    assert line.startswith("tuner: 8 configurations evaluated; lowest latency so far {BLOCK_S=16, num_warps=4} at 40")
