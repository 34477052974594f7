"""`marathon report` and `marathon runs`: a run's report folder, and the table of what ran; thin over the
reports/ package, which reads a server (--address) or the databases under the state directory."""
from __future__ import annotations

import argparse
import sys

from cli.args import ADDRESS, FOLDER, NAMESPACE, PROBLEM_NAME, SINCE, WORKFLOW_ID, _state_dir
from cli.server import why


def _cause(exc: BaseException, unreachable: type) -> str:
    """For a server that could not be reached: why, in a few words, after the error's own text."""
    return f" ({why(exc.__cause__)})" if isinstance(exc, unreachable) and exc.__cause__ else ""


def cmd_report(args: argparse.Namespace) -> int:
    import asyncio
    from reports.collect import ReportError
    from reports.make import Unreachable, report
    try:
        html = asyncio.run(report(args.workflow_id, _state_dir(args.state_dir), args.address, args.out,
                                  args.artifacts, args.namespace))
    except (ReportError, ValueError, OSError) as exc:
        print(f"marathon report: {exc}{_cause(exc, Unreachable)}", file=sys.stderr)
        return 2
    print(html)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    import asyncio
    from reports.collect import ReportError
    from reports.make import Unreachable
    from reports.runs import caller, list_runs, table
    try:
        rows = asyncio.run(list_runs(_state_dir(args.state_dir), args.address, args.problem, args.since, args.namespace,
                                     started_by=caller() if args.mine else None))
    except (ReportError, ValueError, OSError) as exc:
        print(f"marathon runs: {exc}{_cause(exc, Unreachable)}", file=sys.stderr)
        return 2
    if args.json:
        import json
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
    else:
        print(table(rows))
    return 0


def add_report_parser(sub) -> None:
    rep = sub.add_parser("report", help="a run's report folder: report.html (progress plots, attempts), report.md, "
                                        "attempts.csv, notebook.md, best_kernel.py, best_verdict.json; a suite's: "
                                        "fast_p, the geometric mean, a row per problem linking its run's report")
    rep.add_argument("workflow_id", type=WORKFLOW_ID)
    rep.add_argument("--out", default=None, help="the folder to write (default: STATE/reports/WORKFLOW_ID)")
    rep.add_argument("--address", type=ADDRESS, default=None,
                     help="a Temporal server that holds the run; default: the databases under --state-dir")
    rep.add_argument("--namespace", type=NAMESPACE, default="default")
    rep.add_argument("--state-dir", type=FOLDER, default=None, help="default: ~/.local/state/kernel-marathon")
    rep.add_argument("--artifacts", type=FOLDER, default=None, help="the run's artifact store (default: STATE/artifacts)")
    rep.set_defaults(func=cmd_report)


def add_runs_parser(sub) -> None:
    runs = sub.add_parser("runs", help="what ran: id, problem, policy, status, hours, tool calls, best speedup, report")
    runs.add_argument("--address", type=ADDRESS, default=None,
                      help="a Temporal server to ask; default: the databases under --state-dir")
    runs.add_argument("--namespace", type=NAMESPACE, default="default")
    runs.add_argument("--state-dir", type=FOLDER, default=None, help="default: ~/.local/state/kernel-marathon")
    runs.add_argument("--problem", type=PROBLEM_NAME, default=None, help="only this problem's runs")
    runs.add_argument("--since", type=SINCE, default=None, metavar="AGE",
                      help="only runs started within AGE (90m, 24h, 3d, 1w; at most 3650d)")
    runs.add_argument("--mine", action="store_true",
                      help="only the runs this user on this host started (the `started by` column); every run otherwise")
    runs.add_argument("--json", action="store_true", help="one JSON list")
    runs.set_defaults(func=cmd_runs)
