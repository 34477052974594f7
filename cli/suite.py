"""`marathon suite`: the suite workflow's input from the flags, starting it (on an embedded dev server
and workers, or on --address) and printing its report. The workflow is workflows/suite.py."""
from __future__ import annotations

import argparse
import sys

from cli.args import ADDRESS, _add_spec_flags, _state_dir, spec_from_args
from cli.run import start
from cli.server import why
from cli.tables import suite_report_table
from workflows.names import TASK_QUEUE


def suite_spec_from_args(args: argparse.Namespace):
    """One RunSpec per problem file, each built as `marathon run --problem FILE --kernel FILE_kernel.py`
    would build it (so every check of a run applies), the budget --hours-each."""
    from kernels.problems.kernelbench import suite_files
    from workflows.suite import SuiteSpec

    runs = []
    for problem, kernel in suite_files(args.problems):
        one = argparse.Namespace(**vars(args))
        one.problem, one.kernel = problem, kernel if args.kernel == "starter" else args.kernel
        one.hours = args.hours_each if args.hours_each is not None else args.hours
        one.parallel = 1  # --parallel counts the suite's problems at once, not a tuner's configurations
        runs.append(spec_from_args(one))
    return SuiteSpec(runs=runs, parallel=args.parallel)


async def run_suite(args: argparse.Namespace, spec) -> int:
    import asyncio
    import contextlib
    import uuid

    from temporalio.client import WorkflowFailureError

    import worker
    from activities.artifacts import ArtifactStore
    from reports.runs import STARTED_BY, caller
    from workflows import names
    from workflows.suite import SuiteReport

    out = sys.stderr if args.json else sys.stdout
    workflow_id = args.workflow_id or f"suite-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        address, workers = args.address, None
        if address is None:
            state = _state_dir(args.state_dir)
            print("starting an embedded Temporal dev server and workers for this suite ...", file=out, flush=True)
            from reports.local import embedded_server
            try:  # its own database: `marathon runs` and `report` find the suite's runs there later
                address = stack.enter_context(embedded_server(state, workflow_id)).address
            except ValueError as exc:
                print(f"marathon suite: {exc}", file=sys.stderr)
                return 2
        try:
            client = await worker.connect(address, args.namespace)
        except RuntimeError as exc:
            print(f"marathon suite: cannot reach the Temporal server at {address}: {why(exc)}", file=sys.stderr)
            return 2
        if args.address is None:
            workers = worker.build_workers(client, task_queue=args.task_queue, gpu_task_queue=args.gpu_task_queue,
                                           store=ArtifactStore(args.artifacts or state / "artifacts"))
            worker_task = asyncio.create_task(workers.run())
        try:
            handle = await client.start_workflow(names.SUITE_WORKFLOW_TYPE, spec, id=workflow_id,
                                                 task_queue=args.task_queue, result_type=SuiteReport,
                                                 memo={STARTED_BY: caller()})
            print(f"started suite {workflow_id}: {len(spec.runs)} problems, {spec.parallel} at a time, on {address}",
                  file=out, flush=True)
            if args.detach:
                print(workflow_id)
                return 0
            try:
                report = await handle.result()
            except WorkflowFailureError as exc:
                print(f"marathon suite: the suite failed: {exc.cause or exc}", file=sys.stderr)
                return 1
            print(report.model_dump_json(indent=2) if args.json
                  else suite_report_table(report, await stop_reasons(client, report)))
            return 0 if any(e.status == "ok" for e in report.problems) else 1
        finally:
            if workers is not None:
                await workers.shutdown()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(worker_task, 30)


async def stop_reasons(client, report) -> dict[str, str]:
    """Why each problem's run stopped (its result's stop_reason), by workflow id; a run whose result cannot
    be read keeps the suite's own reason for it."""
    from workflows.models import RunReport

    out: dict[str, str] = {}
    for e in report.problems:
        try:
            run = await client.get_workflow_handle(e.workflow_id, result_type=RunReport).result()
            out[e.workflow_id] = run.stop_reason
        except Exception:  # a failed run: the suite's entry says why
            pass
    return out


def cmd_suite(args: argparse.Namespace) -> int:
    return start("suite", args, lambda: suite_spec_from_args(args), run_suite,
                 "stopped following (the suite goes on where a server runs it)")


def add_parser(sub) -> None:
    suite = sub.add_parser("suite", help="one run per problem file of a folder, as child workflows of one suite "
                                         "workflow; reports fast_p and the geometric-mean speedup")
    _add_spec_flags(suite, problem="suite")
    for flag, kw in (("--address", {"type": ADDRESS, "default": None}), ("--namespace", {"default": "default"}),
                     ("--task-queue", {"default": TASK_QUEUE}), ("--workflow-id", {"default": None}),
                     ("--state-dir", {"default": None}), ("--artifacts", {"default": None}),
                     ("--detach", {"action": "store_true"}), ("--json", {"action": "store_true"})):
        suite.add_argument(flag, **kw)
    suite.set_defaults(func=cmd_suite)
