"""What `--help` says: every flag of every sub-command with a line of help and its default.

Flags that are built without help (or with their default alone) get theirs here, by name (the same
meaning wherever the flag appears) or by sub-command and name where the meaning differs; the formatter adds "(default: X)" to a help that
does not say its default already. marathon.py applies both to the whole parser tree."""
from __future__ import annotations

import argparse


STATE_DEFAULT = "~/.local/state/kernel-marathon, or $XDG_STATE_HOME/kernel-marathon"

FLAG_HELP = {
    "--hours": "the run's wall-clock budget in hours; it stops when they are spent",
    "--max-tool-calls": "the run's budget of tool calls (a tuner configuration takes 2: write and profile)",
    "--device": "where candidates are judged: cuda (a GPU), cpu (the Triton interpreter: correctness only, its "
                "times mean nothing), or auto (cuda where a GPU is visible to the evaluation worker)",
    "--shape": "an explicit shape, e.g. B=3,H=4,S=1000 (repeatable; replaces --shapes; default: the named set's)",
    "--gpu-task-queue": "the task queue of the evaluation workers (one per GPU)",
    "--task-queue": "the task queue of the workers that run the workflow, the model and bookkeeping",
    "--namespace": "the Temporal namespace",
    "--workflow-id": "the run's workflow id (default: PROBLEM-POLICY-<8 hex digits>)",
    "--state-dir": f"where the local Temporal databases, the artifacts and the reports live (default: {STATE_DEFAULT})",
    "--artifacts": "the artifact store: kernel sources, notebooks (default: STATE/artifacts)",
    "--detach": "start it, print its workflow id and return (needs --address; `marathon follow` picks it up)",
    "--json": "print the result as one JSON object instead of a table",
    "--address": "a Temporal server, HOST:PORT",
    "--ip": "the address the dev server listens on",
    "--port": "the dev server's gRPC port (workers and the CLI connect here)",
    "--ui-port": "the port of the Temporal Web UI",
    "--mode": "compile: build only; test: build and check correctness; full: also time it against the baselines",
    "--no-baselines": "do not time the problem's baselines (no speedups)",
    "--id": "the schedule's id",
    "--policy": "llm: a model writes and edits the kernel; tuner: explores the kernel's declared TUNABLES, no model",
    "--shapes": "the named shape set candidates are judged on",
}

COMMAND_FLAG_HELP = {  # where a flag means something else in one sub-command
    ("eval", "--device"): "where to judge: cuda (a GPU), cpu (the Triton interpreter: correctness only, its times "
                          "mean nothing), or auto (cuda when a GPU is visible)",
    ("suite", "--address"): "a Temporal server whose workers run the suite (e.g. `marathon dev`); default: an "
                            "embedded one for this command",
    ("suite", "--workflow-id"): "the suite's workflow id (default: suite-<8 hex digits>); each problem's run is "
                                "SUITE_ID/N-PROBLEM",
    ("suite", "--json"): "print the suite's report (per problem, fast_p, geometric mean) as one JSON object",
    ("follow", "--workflow-id"): "the run to follow (its workflow id, as `run --detach` printed it)",
    ("follow", "--address"): "the Temporal server that holds the run, HOST:PORT",
    ("report", "workflow_id"): "the run's workflow id (`marathon runs` lists them)",
    ("schedule create", "--address"): "the Temporal server to keep the schedule on, HOST:PORT",
    ("schedule list", "--address"): "the Temporal server whose schedules to list, HOST:PORT",
    ("schedule delete", "--address"): "the Temporal server that keeps the schedule, HOST:PORT",
    ("schedule delete", "--id"): "the id of the schedule to delete",
}

UNSET_MEANS = {  # what a flag whose default is "not given" does then, where its help does not say
    "--model": "none: the tuner policy, no model",
    "--base-url": "OpenAI's",
    "--target-speedup": "none: the run spends its whole budget",
    "--memory-from": "an empty memory",
    "--reps": "the judge's, by device and kernel time",
    "--problem": "every problem",  # `runs`; elsewhere --problem is required
    "--since": "any age",
    "--patch": "none: the task's own files, or --kernel's text",
    "--kernel": "the starter (with --problem); the task's own files (with --task)",
}

COMMAND_HELP = {  # `marathon --help`: one line each; `marathon COMMAND --help` has the rest
    "eval": "judge one kernel against the reference and baselines",
    "run": "start a run and follow it to its report",
    "suite": "one run per problem file of a folder, scored together",
    "follow": "follow a run already started, to its report",
    "dev": "the Temporal dev server, its Web UI and the workers",
    "report": "write a run's report folder (report.html and more)",
    "runs": "what ran: status, best speedup, who started it, report",
    "schedule": "nightly (or any cron) runs as Temporal schedules",
}


class DefaultsFormatter(argparse.HelpFormatter):
    """Each flag's help ends with its default, unless it says it already or there is none to say (a switch,
    a repeatable flag, a required one)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (text and "default" not in text.lower() and action.option_strings and not action.required
                and action.default not in (None, False, [], argparse.SUPPRESS)):
            text += " (default: %(default)s)"
        return text


def _required(parser: argparse.ArgumentParser, action: argparse.Action) -> bool:
    """Required itself, or one of a group of which one is required (--problem or --problems)."""
    return action.required or any(g.required and action in g._group_actions for g in parser._mutually_exclusive_groups)


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield action


def complete(parser: argparse.ArgumentParser, command: str = "") -> None:
    """Fill in the help the parser tree lacks (FLAG_HELP, COMMAND_FLAG_HELP, COMMAND_HELP) and format each
    with its default."""
    parser.formatter_class = DefaultsFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        name = action.option_strings[0] if action.option_strings else action.dest
        what = COMMAND_FLAG_HELP.get((command, name)) or FLAG_HELP.get(name)
        if not action.help:
            action.help = what
        elif what and action.help.lower().startswith("default"):  # a help that gives the default alone
            action.help = what if "default" in what else f"{what} ({action.help})"
        if (action.help and action.default is None and name in UNSET_MEANS and not _required(parser, action)
                and "default" not in action.help.lower()):
            action.help += f" (default: {UNSET_MEANS[name]})"
    for sub in _subparsers(parser):
        for choice in sub._choices_actions:  # the one-line list under "commands"
            choice.help = COMMAND_HELP.get(f"{command} {choice.dest}".strip(), choice.help)
        for name, child in sub.choices.items():
            complete(child, f"{command} {name}".strip())


def walk(parser: argparse.ArgumentParser, command: str = ""):
    """(sub-command, action, required) for every flag and positional of the tree: what the tests check."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from walk(child, f"{command} {name}".strip())
        elif not isinstance(action, argparse._HelpAction):
            yield command, action, _required(parser, action)

