"""Prompt size and compactions over a scripted 1,000-tool-call run: the figures behind compaction's budget.

    .venv/bin/python bench/compaction_profile.py [--tool-calls 1000] [--out .marathon/bench/compaction_profile.json]

Drives the compaction library exactly as the workflow does (compaction/rehearsal.py: triggers,
`compact_memory` with a forgetful summarizing model that answers every third request with garbage
or an exception, `build_messages` for every model call) with the KDA problem's real statement in the
goal block, and reports, per configuration: prompt tokens at each model call (max, median, p95, as
`compaction.prompt.estimate_tokens` counts them), compactions (and which trigger fired), fallbacks,
and the memory's size. CPU only, a few seconds; no Temporal server, no model endpoint."""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from compaction.memory import LiveFigures
from compaction.prompt import estimate_tokens, memory_block, system_message
from compaction.rehearsal import FIRST_FAILURE, ScriptConfig, kda_goal, mentions, run_scripted

ROOT = Path(__file__).resolve().parent.parent

CONFIGS = {
    "defaults (compact_every=40, context_budget=48000)": dict(),
    "tight (compact_every=25, context_budget=16000)": dict(context_budget=16_000, compact_every=25, seed=1),
    "fraction only (compact_every=0, context_budget=24000)": dict(context_budget=24_000, compact_every=0, seed=2),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool-calls", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=ROOT / ".marathon" / "bench" / "compaction_profile.json")
    args = ap.parse_args(argv)

    statement_file = ROOT / "kernels" / "problems" / "kda" / "statement.md"
    goal = kda_goal(statement_file.read_text() if statement_file.exists() else None)
    runs = {}
    for name, over in CONFIGS.items():
        cfg = ScriptConfig(tool_calls=args.tool_calls, **over)
        t0 = time.perf_counter()
        run = run_scripted(cfg, goal=goal)
        elapsed = time.perf_counter() - t0
        prof = run.profile()
        budget = cfg.context_budget
        prof["over_budget_calls"] = sum(1 for c in run.calls if c.prompt_tokens > budget)
        prof["goal_block_changed_calls"] = sum(1 for c in run.calls if c.fixed_goal != run.calls[0].fixed_goal)
        prof["memory_best_wrong"] = sum(1 for c in run.compactions if c.memory.best != c.true_best)
        blocks = [memory_block(c.memory) for c in run.compactions]
        prof["failures_forgotten"] = sum(1 for c, b in zip(run.compactions, blocks)
                                         for _, f in c.failures_before if not mentions(b, f))
        prof["first_failure_kept_through"] = f"{sum(1 for b in blocks if mentions(b, FIRST_FAILURE))} of " \
                                             f"{len(blocks)} compactions"
        prof["system_and_goal_tokens"] = estimate_tokens([system_message(goal, LiveFigures())])
        prof["seconds"] = round(elapsed, 2)
        runs[name] = prof
        print(f"{name}:\n  {prof['tool_calls']} tool calls, {prof['model_calls']} model calls; prompt tokens "
              f"max {prof['prompt_tokens_max']}, median {prof['prompt_tokens_median']:.0f}, "
              f"p95 {prof['prompt_tokens_p95']} (budget {budget})\n  {prof['compactions']} compactions "
              f"({prof['compactions_every_n']} every-N, {prof['compactions_fraction']} past {cfg.fraction:.0%} "
              f"of the budget), {prof['fallbacks']} fell back to the deterministic summary "
              f"({', '.join(prof['fallback_reasons'])}); memory max {prof['memory_tokens_max']} tokens, "
              f"median {prof['memory_tokens_median']:.0f}\n  over budget: {prof['over_budget_calls']}, goal block "
              f"changed: {prof['goal_block_changed_calls']}, memory best wrong: {prof['memory_best_wrong']}, "
              f"failures forgotten: {prof['failures_forgotten']} of {prof['failures']}; first failure kept "
              f"through {prof['first_failure_kept_through']}\n  compact activity in history: input max "
              f"{prof['activity_input_bytes_max'] / 1e3:.0f} kB, result max {prof['activity_result_bytes_max'] / 1e3:.0f} kB")
    out = {"what": "scripted tool-call run through compaction/ (compaction/rehearsal.py)",
           "command": "python bench/compaction_profile.py" + (f" --tool-calls {args.tool_calls}"
                                                              if args.tool_calls != 1000 else ""),
           "estimate": "compaction.prompt.estimate_tokens: ceil(utf8 bytes / 3.5) + 4 per message + 8 per tool call + 3",
           "host": platform.node(), "python": platform.python_version(), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
