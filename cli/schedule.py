"""`marathon schedule`: nightly (or any cron) runs, or suites, as Temporal schedules: create or replace,
list, delete."""
from __future__ import annotations

import argparse
import sys

from cli.args import ADDRESS, NAMESPACE, SCHEDULE_ID, TASK_QUEUE_NAME, _add_spec_flags, spec_from_args
from kernels.problems.spec import ShapeError
from workflows.names import TASK_QUEUE


async def _schedule_async(args: argparse.Namespace, spec) -> int:
    from temporalio.client import (Schedule, ScheduleActionStartWorkflow, ScheduleAlreadyRunningError,
                                   ScheduleOverlapPolicy, SchedulePolicy, ScheduleSpec, ScheduleUpdate)

    import worker
    from reports.runs import STARTED_BY, caller
    from workflows import names

    client = await worker.connect(args.address, args.namespace)
    if args.schedule_command == "list":
        async for entry in await client.list_schedules():
            info = entry.info
            nxt = info.next_action_times[0].isoformat() if info and info.next_action_times else "-"
            print(f"{entry.id}  next run {nxt}")
        return 0
    if args.schedule_command == "delete":
        from temporalio.service import RPCError, RPCStatusCode
        try:
            await client.get_schedule_handle(args.id).delete()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise  # one line at the CLI's boundary (marathon.py)
            print(f"marathon schedule: no schedule {args.id!r} on {args.address} (namespace {args.namespace})",
                  file=sys.stderr)
            return 2
        print(f"deleted schedule {args.id}")
        return 0
    suite = not hasattr(spec, "problem")  # a SuiteSpec (workflows/suite.py): the suite workflow
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(names.SUITE_WORKFLOW_TYPE if suite else names.WORKFLOW_TYPE, spec,
                                           id=args.id, task_queue=args.task_queue,
                                           memo={STARTED_BY: caller()}),  # whose runs, in `marathon runs`
        spec=ScheduleSpec(cron_expressions=[args.cron]),
        # a night's run that is still going when the next one is due keeps the GPUs: skip, don't pile up
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP))
    try:
        await client.create_schedule(args.id, schedule)
        verb = "created"
    except ScheduleAlreadyRunningError:
        await client.get_schedule_handle(args.id).update(lambda _: ScheduleUpdate(schedule=schedule))
        verb = "replaced"
    what = (f"a suite of {len(spec.runs)} problems" if suite
            else f"{spec.problem} ({spec.resolved_policy()})")
    print(f"{verb} schedule {args.id}: {what} at '{args.cron}' "
          f"on {args.address}, task queue {args.task_queue}; watch its runs in the Web UI")
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    import asyncio
    spec = None
    if args.schedule_command == "create":
        try:
            if args.problems:
                from cli.suite import suite_spec_from_args
                spec = suite_spec_from_args(args)
            else:
                spec = spec_from_args(args)
        except (ShapeError, KeyError, ValueError, OSError) as exc:
            print(f"marathon schedule: {exc}", file=sys.stderr)
            return 2
    try:
        return asyncio.run(_schedule_async(args, spec))
    except RuntimeError as exc:  # the server is unreachable, or refused the schedule
        print(f"marathon schedule: {exc}", file=sys.stderr)
        return 3


def add_parser(sub) -> None:
    sched = sub.add_parser("schedule", help="nightly (or any cron) runs as Temporal schedules")
    ssub = sched.add_subparsers(dest="schedule_command", required=True)
    create = ssub.add_parser("create", help="create or replace a schedule that starts a run")
    create.add_argument("--id", type=SCHEDULE_ID, required=True,
                        help="the schedule id; each run's workflow id starts with it")
    create.add_argument("--cron", default="0 22 * * *", help="when to start a run (default: 22:00 UTC daily)")
    _add_spec_flags(create, problem="either")
    create.add_argument("--task-queue", type=TASK_QUEUE_NAME, default=TASK_QUEUE)
    listing = ssub.add_parser("list", help="the schedules and their next run")
    delete = ssub.add_parser("delete", help="delete a schedule (the runs it started go on)")
    delete.add_argument("--id", type=SCHEDULE_ID, required=True)
    for p in (create, listing, delete):
        p.add_argument("--address", type=ADDRESS, default="localhost:7233")
        p.add_argument("--namespace", type=NAMESPACE, default="default")
    sched.set_defaults(func=cmd_schedule)
