"""`marathon suite`: the suite workflow's input from the flags, starting it (on an embedded dev server
and workers, or on --address) and printing its report. The workflow is workflows/suite.py."""
from __future__ import annotations

import argparse
import sys
from typing import Callable


def suite_spec_from_args(args: argparse.Namespace, spec_from_args: Callable):
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


def format_report(report) -> str:
    lines = [f"suite {report.workflow_id}: {len(report.problems)} problems",
             f"  {'problem':<24} {'status':<12} {'attempt':>7}  speedups (geometric mean over the shapes)"]
    for e in report.problems:
        sp = ", ".join(f"{v:.3g}x vs {k}" for k, v in e.speedups.items()) or e.reason[:80]
        lines.append(f"  {e.problem:<24} {e.status:<12} {e.best_attempt if e.best_attempt is not None else '-':>7}  {sp}")
    fast = ", ".join(f"{k} {v:.2f}" for k, v in report.fast_p.items())
    gm = report.geomean_speedup_vs_eager
    lines.append(f"  {fast}; geometric-mean speedup vs eager {f'{gm:.3g}x' if gm is not None else '-'}")
    return "\n".join(lines)


async def run_suite(args: argparse.Namespace, spec) -> int:
    import asyncio
    import contextlib
    import uuid

    from temporalio.client import WorkflowFailureError

    import worker
    from activities.artifacts import ArtifactStore
    from marathon import _state_dir
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
        client = await worker.connect(address, args.namespace)
        if args.address is None:
            workers = worker.build_workers(client, task_queue=args.task_queue, gpu_task_queue=args.gpu_task_queue,
                                           store=ArtifactStore(args.artifacts or state / "artifacts"))
            worker_task = asyncio.create_task(workers.run())
        try:
            handle = await client.start_workflow(names.SUITE_WORKFLOW_TYPE, spec, id=workflow_id,
                                                 task_queue=args.task_queue, result_type=SuiteReport)
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
            print(report.model_dump_json(indent=2) if args.json else format_report(report))
            return 0 if any(e.status == "ok" for e in report.problems) else 1
        finally:
            if workers is not None:
                await workers.shutdown()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(worker_task, 30)
