"""Context compaction and goal conditioning: the run's Memory, prompt assembly within a token
budget, and the summarizers (model-based with a deterministic fallback). Pure: safe in workflow code."""
from compaction.memory import (MERGED, AttemptDigest, BestKernel, Failure, Goal, LiveFigures, Memory,
                               Strategy, empty_memory)
from compaction.prompt import (PromptBudgetError, build_messages, estimate_tokens, goal_block, memory_block,
                               needs_compaction, strip_figures, tail_turns, tools_tokens)
from compaction.summarize import (RESPONSE_FORMAT, CompactionOutputError, clip_transcript, deterministic_memory,
                                  merge_ledger, parse_model_memory, summary_messages)

__all__ = [
    "MERGED", "AttemptDigest", "BestKernel", "Failure", "Goal", "LiveFigures", "Memory", "Strategy", "empty_memory",
    "PromptBudgetError", "build_messages", "estimate_tokens", "goal_block", "memory_block", "needs_compaction",
    "strip_figures", "tail_turns", "tools_tokens", "RESPONSE_FORMAT", "CompactionOutputError", "clip_transcript", "deterministic_memory",
    "merge_ledger", "parse_model_memory", "summary_messages",
]
