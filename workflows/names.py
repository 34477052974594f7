"""Names shared by the workflow, the workers and the CLI: task queues, activity names, search attributes.
Pure: the workflow refers to activities by these strings only, and the CLI's lightest commands import
it (the search-attribute keys, which need temporalio, are made on first use)."""
from __future__ import annotations

from typing import Any

WORKFLOW_TYPE = "KernelOptimization"
SUITE_WORKFLOW_TYPE = "KernelSuite"  # workflows/suite.py: one KernelOptimization child per problem
TASK_QUEUE = "marathon"  # the workflow, the model and the bookkeeping activities
GPU_TASK_QUEUE = "marathon-gpu"  # compile/test/profile: one worker process per GPU
AGENT_ID_INFIX = "/agent-"  # an agent's workflow id: <its run's id>/agent-<i>, i from 1


def agent_id(run_id: str, i: int) -> str:
    return f"{run_id}{AGENT_ID_INFIX}{i}"

# activities on TASK_QUEUE
PREPARE_RUN = "prepare_run"
AGENT_TURN = "agent_turn"
COMPACT = "compact"  # activities/compaction.py
NOTEBOOK = "notebook"  # a local activity: one line of the lab notebook
# the verdict this run's own evaluations recorded for a source (islands: a best an agent claims is taken
# only once it is found there)
FIND_VERDICT = "find_verdict"
WRITE_KERNEL, EDIT_KERNEL, SHOW_KERNEL, LIST_ATTEMPTS, NOTE = (
    "write_kernel", "edit_kernel", "show_kernel", "list_attempts", "note")
# activities on GPU_TASK_QUEUE
COMPILE_KERNEL, TEST_KERNEL, PROFILE_KERNEL = "compile_kernel", "test_kernel", "profile_kernel"
# an evaluation's failure type when the work itself cannot be judged: a task's own files fail, or a
# file problem's own code; non-retryable, the run ends saying so
TASK_BROKEN, PROBLEM_BROKEN = "TaskBroken", "ProblemBroken"
# the model's tools are these activities, by the same names
TOOL_NAMES = (WRITE_KERNEL, EDIT_KERNEL, COMPILE_KERNEL, TEST_KERNEL, PROFILE_KERNEL, SHOW_KERNEL, LIST_ATTEMPTS,
              NOTE)
EVAL_TOOLS = (COMPILE_KERNEL, TEST_KERNEL, PROFILE_KERNEL)
ACTIVITY_NAMES = (PREPARE_RUN, AGENT_TURN, COMPACT, NOTEBOOK, FIND_VERDICT, *TOOL_NAMES)

# workflow.patched() ids: histories recorded before a change replay without it
PATCH_SWEEP_BEST = "sweep-check-of-the-best"
PATCH_FAULT_REPORTS = "fault-reports"  # a failed tool call in the notebook; a refused API key ends the run
PATCH_CONCURRENT_EVALS = "concurrent-evaluations"  # a reply's evaluation calls run at once, up to eval.parallel
PATCH_UNTIMED_RANKING = "untimed-ranking"  # on a CPU the best and the tuner rank by interpreter time, not speedup
# islands: a best another agent claims is looked up among the run's recorded verdicts before it is taken
PATCH_VERIFIED_BESTS = "bests-verified-against-recorded-verdicts"
PATCH_TOKEN_SCALE = "server-token-count"  # the context budget scaled by the server's count of the prompts
# the state carried across continue-as-new bounded (limits.MAX_CARRY_BYTES): pruned harder, or the run ends
PATCH_CARRY_BOUND = "carried-state-bounded"

# the signal an activity sends its workflow when an attempt failed and Temporal will retry it
FAULT_SIGNAL = "activity_fault"
# islands: an agent tells the run of a new best or a failure; the run passes it on to its other agents
AGENT_NEWS_SIGNAL = "agent_news"

# custom search attributes: `marathon dev` registers them; the Web UI filters runs by them, e.g.
#   MarathonProblem = "kda" AND MarathonBestSpeedup > 1.2
SEARCH_ATTRIBUTES = {  # name -> the type `temporal server start-dev --search-attribute` takes
    "MarathonProblem": "Keyword",
    "MarathonPolicy": "Keyword",
    "MarathonBestSpeedup": "Double",
    "MarathonToolCalls": "Int",
}
# their typed keys (temporalio.common.SearchAttributeKey): names.SA_PROBLEM, ...
_SA_KEYS = {"SA_PROBLEM": ("for_keyword", "MarathonProblem"), "SA_POLICY": ("for_keyword", "MarathonPolicy"),
            "SA_BEST_SPEEDUP": ("for_float", "MarathonBestSpeedup"), "SA_TOOL_CALLS": ("for_int", "MarathonToolCalls")}


def __getattr__(name: str) -> Any:
    if name in _SA_KEYS:
        from temporalio.common import SearchAttributeKey
        make, attribute = _SA_KEYS[name]
        key = getattr(SearchAttributeKey, make)(attribute)
        globals()[name] = key
        return key
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
