"""`marathon suite`: the suite workflow's input from the flags, starting it (on an embedded dev server
and workers, or on --address) and printing its report. The workflow is workflows/suite.py."""
from __future__ import annotations

import argparse
import sys

from cli.args import ADDRESS, NAMESPACE, TASK_QUEUE_NAME, WORKFLOW_ID, _add_spec_flags, _state_dir, spec_from_args
from cli.run import start
from cli.server import why
from cli.tables import suite_report_table
from workflows.names import TASK_QUEUE


def shapes_for(spec, given: list[dict[str, int]]) -> list[str]:
    """The --shape values that apply to one problem: each shape's names that the file has (a file
    that has none of a shape's names keeps its own shapes for it)."""
    out = []
    for shape in given:
        mine = {k: v for k, v in shape.items() if k in spec.dims}
        if mine:
            out.append(",".join(f"{k}={v}" for k, v in mine.items()))
    return out


def suite_spec_from_args(args: argparse.Namespace):
    """One RunSpec per problem file, each built as `marathon run --problem FILE --kernel FILE_kernel.py`
    would build it (so every check of a run applies), the budget --hours-each. --shape applies to the
    files that have its names; a name no file has is refused."""
    from kernels.problems.kernelbench import suite_files
    from kernels.problems.spec import get_problem, parse_shape, resolve_problem
    from workflows.suite import SuiteSpec

    given = [parse_shape(s) for s in args.shape]
    files = suite_files(args.problems)
    specs = [get_problem(*resolve_problem(problem)) for problem, _ in files]
    unknown = sorted({k for shape in given for k in shape} - {d for spec in specs for d in spec.dims})
    if unknown:
        raise ValueError(f"--shape names {', '.join(unknown)}, which no problem of {args.problems!r} has")
    runs = []
    for (problem, kernel), spec in zip(files, specs):
        one = argparse.Namespace(**vars(args))
        one.problem, one.kernel = problem, kernel if args.kernel == "starter" else args.kernel
        one.hours = args.hours_each if args.hours_each is not None else args.hours
        one.parallel = 1  # --parallel counts the suite's problems at once, not a tuner's configurations
        one.shape = shapes_for(spec, given)
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
    from workflows.suite import SUITE_PROBLEMS, SuiteReport

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
                                                 memo={STARTED_BY: caller(), SUITE_PROBLEMS: len(spec.runs)})
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
            html = None
            try:  # the suite's report folder, each problem's run's beside it
                from reports.make import write_suite_for
                state_for = _state_dir(args.state_dir)
                html = await write_suite_for(client, workflow_id, state_for,
                                             artifacts=args.artifacts or state_for / "artifacts")
            except Exception as exc:  # the suite's outcome stands without its report folder
                print(f"marathon suite: the report folder was not written: {exc}", file=sys.stderr)
            if args.json:
                data = report.model_dump(mode="json")
                if html is not None:
                    data["report"] = str(html)
                import json
                print(json.dumps(data, indent=2))
            else:
                print(suite_report_table(report, await stop_reasons(client, report)))
                if html is not None:
                    print(f"\nreport: {html}")
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
    for flag, kw in (("--address", {"type": ADDRESS, "default": None}),
                     ("--namespace", {"type": NAMESPACE, "default": "default"}),
                     ("--task-queue", {"type": TASK_QUEUE_NAME, "default": TASK_QUEUE}),
                     ("--workflow-id", {"type": WORKFLOW_ID, "default": None}),
                     ("--state-dir", {"default": None}), ("--artifacts", {"default": None}),
                     ("--detach", {"action": "store_true"}), ("--json", {"action": "store_true"})):
        suite.add_argument(flag, **kw)
    suite.set_defaults(func=cmd_suite)
