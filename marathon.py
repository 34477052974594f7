"""The `marathon` command: a thin front over the evaluator (`eval`) and the Temporal runs (`run`, `dev`, ...).
Each sub-command lives in cli/; this file puts the parser together and dispatches."""
from __future__ import annotations

import argparse
import os
import sys

from cli import dev, problem, report, run, schedule, suite
from cli import eval as eval_command
from cli.args import Parser
from cli.help import complete
from cli.server import refusal
from kernels.settings import exit_on_bad_settings


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="marathon", description="Day-long, crash-proof Triton kernel optimization.",
                epilog="`marathon COMMAND --help` explains a command's flags.")
    sub = ap.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    eval_command.add_parser(sub)
    problem.add_parser(sub)
    run.add_run_parser(sub)
    suite.add_parser(sub)
    run.add_follow_parser(sub)
    dev.add_parser(sub)
    report.add_report_parser(sub)
    report.add_runs_parser(sub)
    schedule.add_parser(sub)
    complete(ap)
    return ap


def json_only_stdout() -> None:
    """With --json, stdout carries the JSON and nothing else: whatever native code (Temporal's core logs
    a slow or failed workflow task to file descriptor 1) or a child process writes to descriptor 1 goes
    to stderr; Python's own sys.stdout keeps the original stdout for the JSON."""
    sys.stdout.flush()
    original = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = open(original, "w", encoding="utf-8", closefd=True)


def main(argv: list[str] | None = None, process: bool = False) -> int:
    """`process`: this is the command's own process (cli()), whose file descriptors it may rearrange."""
    args = build_parser().parse_args(argv)
    exit_on_bad_settings("marathon")
    if process and getattr(args, "json", False):
        json_only_stdout()
    try:
        return args.func(args)
    except Exception as exc:  # a request the server refused, or a server gone: one line, not a traceback
        line = refusal(exc, getattr(args, "address", None))
        if line is None:
            raise
        print(f"marathon {args.command}: {line}", file=sys.stderr)
        return 2


def cli() -> None:
    """The command line's entry point: main(), then out without the interpreter's finalization. After a
    Temporal client was used, the SDK's core threads can abort an exiting interpreter ("Fatal Python
    error: PyGILState_Release", seen with temporalio 1.35 in `marathon follow`) once the report is
    already printed, turning success into exit status 134."""
    try:
        code = main(process=True)
    except SystemExit as exc:  # argparse errors and --help
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    cli()
