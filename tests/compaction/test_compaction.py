"""Compaction's contract, in library form: a scripted 1,000-tool-call run through the compaction loop.

At every model call the prompt is under budget; the goal block at call 1,000 equals the one at call 1
except for its figures; a strategy that failed before a compaction is still in the memory after it
(and after every later one); the memory's best kernel always equals the run's true best; a model
that answers summaries with garbage triggers the fallback and the run goes on."""
from __future__ import annotations

import pytest

from compaction.memory import Memory
from compaction.prompt import goal_text, memory_block
from compaction.rehearsal import FIRST_FAILURE, ScriptConfig, kda_goal, mentions, run_scripted

CONFIGS = {
    "defaults": ScriptConfig(),  # RunSpec's defaults: compact every 40 calls, 48k-token budget
    "tight": ScriptConfig(context_budget=16_000, compact_every=25, seed=1),
    "fraction-only": ScriptConfig(context_budget=24_000, compact_every=0, seed=2),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def run(request):
    return run_scripted(CONFIGS[request.param])


def test_the_run_reaches_1000_tool_calls(run):
    assert run.tool_calls == 1000
    assert len(run.calls) > 500  # model calls (some turns carry two tool calls)
    assert len(run.compactions) >= 1000 // 40 - 1


def test_every_prompt_is_under_budget(run):
    budget = run.config.context_budget
    over = [(c.call, c.prompt_tokens) for c in run.calls if c.prompt_tokens > budget]
    assert not over, f"prompts over the {budget}-token budget: {over[:5]}"
    # and the budget is actually used: prompts grow toward it between compactions
    assert max(c.prompt_tokens for c in run.calls) > 0.5 * budget


def test_goal_block_never_changes_but_its_figures(run):
    first, last = run.calls[0], run.calls[-1]
    assert last.call >= 500 and last.tool_calls >= 990
    assert last.fixed_goal == first.fixed_goal
    assert all(c.fixed_goal == first.fixed_goal for c in run.calls)
    assert first.figures != last.figures  # the figures moved
    assert "Tool calls: 0 used of 1000" in first.figures and "none yet" in first.figures
    assert f"Tool calls: {last.tool_calls} used of 1000" in last.figures
    assert goal_text(kda_goal()) in first.fixed_goal  # the whole goal block, never cut


def test_failed_strategies_survive_every_later_compaction(run):
    assert any(FIRST_FAILURE == f for _, f in run.failures)
    for comp in run.compactions:
        block = memory_block(comp.memory)
        missing = [(n, f) for n, f in comp.failures_before if not mentions(block, f)]
        assert not missing, f"compaction {comp.index} forgot {len(missing)} failures, e.g. {missing[:3]}"
    after_first = [c for c in run.compactions if any(n == 2 for n, _ in c.failures_before)]
    assert after_first and all(mentions(c.memory, FIRST_FAILURE) for c in after_first)


def test_memory_best_always_equals_the_true_best(run):
    assert all(c.memory_best == c.true_best for c in run.calls)
    for comp in run.compactions:
        assert comp.memory.best == comp.true_best, f"compaction {comp.index}"
    assert run.best is not None and run.calls[-1].memory_best == run.best
    # the forgetful model claimed attempt 999 at 1 us in every valid summary; it never got through
    assert all(c.memory.best is None or c.memory.best.attempt != 999 for c in run.compactions)


def test_garbage_summaries_fall_back_and_the_run_goes_on(run):
    fallbacks = [c for c in run.compactions if not c.used_model]
    used = [c for c in run.compactions if c.used_model]
    assert fallbacks and used
    reasons = " ".join(c.fallback_reason or "" for c in fallbacks)
    assert "CompactionOutputError" in reasons and "RuntimeError" in reasons
    # the compaction after each fallback happened and the memory kept counting
    assert [c.memory.compactions for c in run.compactions] == list(range(1, len(run.compactions) + 1))
    assert run.compactions[-1].tool_calls > fallbacks[0].tool_calls


def test_goal_and_hints_are_trusted_values(run):
    for comp in run.compactions:
        assert comp.memory.goal == kda_goal()
        assert comp.memory.hints[0] == "the H200 has 50 MB of L2; keep the state resident"


def test_memory_stays_bounded(run):
    assert max(c.tokens_after for c in run.compactions) < 0.35 * run.config.context_budget or \
        run.config.context_budget < 20_000
    assert max(c.tokens_after for c in run.compactions) < 9_000
    final: Memory = run.memory
    assert len(final.failures) <= 40 and len(final.strategies) <= 30


def test_both_triggers_fire():
    r = run_scripted(ScriptConfig(tool_calls=400, context_budget=200_000, compact_every=30, seed=3))
    assert {c.trigger for c in r.compactions} == {"every"}
    assert 11 <= len(r.compactions) <= 13  # every 30 tool calls (a turn may carry two)
    assert all(c.tokens_before > c.tokens_after for c in r.compactions)
    r = run_scripted(ScriptConfig(tool_calls=300, context_budget=20_000, compact_every=0, seed=4))
    assert r.compactions and {c.trigger for c in r.compactions} == {"fraction"}


def test_a_model_that_only_answers_garbage_never_stops_the_run():
    def garbage(settings, messages, tools=None, response_format=None):
        return {"choices": [{"message": {"role": "assistant", "content": "<html>502 Bad Gateway</html>"}}]}

    r = run_scripted(ScriptConfig(tool_calls=1000, seed=5), chat=garbage)
    assert r.tool_calls == 1000
    assert r.compactions and not any(c.used_model for c in r.compactions)
    assert all("not JSON" in (c.fallback_reason or "") for c in r.compactions)
    assert all(c.prompt_tokens <= r.config.context_budget for c in r.calls)
    for comp in r.compactions:
        assert comp.memory.best == comp.true_best
        block = memory_block(comp.memory)
        assert all(mentions(block, f) for _, f in comp.failures_before)
