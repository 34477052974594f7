"""`marathon schedule`: nightly (or any cron) runs, or suites, as Temporal schedules: create or replace,
list, delete."""
from __future__ import annotations

import argparse
import re
import sys

from cli.args import ADDRESS, NAMESPACE, SCHEDULE_ID, TASK_QUEUE_NAME, _add_spec_flags, _shown, spec_from_args
from kernels.problems.spec import ShapeError
from workflows.names import TASK_QUEUE

MIN_INTERVAL_H = 1  # a schedule's runs are at least this many hours apart (a run is hours of a GPU's time)
MAX_EVERY_H = 8784  # `@every`: at most a (leap) year
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# a cron field's values and the names it takes for them
_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
           ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
           ("day of week", 0, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")))


def _cron_field(text: str, what: str, low: int, high: int, names: tuple[str, ...]) -> set[int]:
    """One field of a 5-field cron expression: a comma list of *, N, N-M, each with an optional /STEP;
    the values it names, or ValueError."""
    def value(x: str) -> int:
        if x.upper() in names:
            return low + names.index(x.upper())
        if not re.fullmatch(r"[0-9]{1,2}", x) or not low <= int(x) <= high:
            raise ValueError(f"{what} {x!r} is not {low}-{high}" + (f" or {names[0]}-{names[-1]}" if names else ""))
        return int(x)

    out: set[int] = set()
    for item in text.split(","):
        span, slash, step_text = item.partition("/")
        if slash and not (re.fullmatch(r"[0-9]{1,2}", step_text) and int(step_text) >= 1):
            raise ValueError(f"{what}: step {step_text!r} is not a number from 1")
        step = int(step_text) if slash else 1
        if span == "*":
            first, last = low, high
        elif "-" in span:
            a, _, b = span.partition("-")
            first, last = value(a), value(b)
            if first > last:
                raise ValueError(f"{what}: the range {span!r} runs backwards")
        else:
            first = value(span)
            last = high if slash else first
        out.update(range(first, last + 1, step))
    return out


def _every_hours(text: str) -> float:
    """`@every` DURATION (Go's units: 90m, 2h, 1h30m, 3600s) in hours, or ValueError."""
    parts = re.findall(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)(h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"@every {text!r}: give a duration such as 2h, 90m, 1h30m")
    return sum(float(n) * {"h": 1, "m": 1 / 60, "s": 1 / 3600}[u] for n, u in parts)


def CRON(text: str) -> str:
    """An argparse type: when a schedule starts a run, as the README documents it: a 5-field cron
    expression (minute hour day-of-month month day-of-week, in UTC), one of the macros @daily, @weekly,
    @monthly, @yearly, @hourly, or `@every DURATION`; its runs at least MIN_INTERVAL_H hour apart. A cron
    expression with one minute value starts runs on the hour at the closest, so it is refused with more."""
    if len(text) > 200:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: a cron expression of at most 200 characters")
    spaced = " ".join(text.split())
    try:
        if spaced.lower() in MACROS:
            return spaced.lower()
        if spaced.lower().startswith("@every "):
            hours = _every_hours(spaced[len("@every "):])
            if not MIN_INTERVAL_H <= hours <= MAX_EVERY_H:
                raise ValueError(f"@every: runs at least {MIN_INTERVAL_H} h apart and at most {MAX_EVERY_H} h "
                                 f"(a year)")
            return spaced
        fields = spaced.split(" ")
        if len(fields) != 5:
            raise ValueError("give 5 fields (minute hour day-of-month month day-of-week), e.g. '0 22 * * *', "
                             "or @daily, @weekly, @every 6h")
        values = [_cron_field(f, *spec) for f, spec in zip(fields, _FIELDS)]
        if len(values[0]) != 1:
            raise ValueError(f"one minute per hour: runs at least {MIN_INTERVAL_H} h apart")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: {exc}") from None
    return spaced


CRON.__name__ = "cron expression"


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
    except RuntimeError as exc:  # the server is unreachable, or refused the schedule: the address is the input
        from cli.server import refusal
        print(f"marathon schedule: {refusal(exc, args.address) or exc}", file=sys.stderr)
        return 2


def add_parser(sub) -> None:
    sched = sub.add_parser("schedule", help="nightly (or any cron) runs as Temporal schedules")
    ssub = sched.add_subparsers(dest="schedule_command", required=True)
    create = ssub.add_parser("create", help="create or replace a schedule that starts a run")
    create.add_argument("--id", type=SCHEDULE_ID, required=True,
                        help="the schedule id; each run's workflow id starts with it")
    create.add_argument("--cron", type=CRON, default="0 22 * * *",
                        help=f"when to start a run, in UTC: 5 cron fields with one minute value, @daily, @weekly, "
                             f"or @every DURATION of at least {MIN_INTERVAL_H} h (default: 22:00 daily)")
    _add_spec_flags(create, problem="either")
    create.add_argument("--task-queue", type=TASK_QUEUE_NAME, default=TASK_QUEUE)
    listing = ssub.add_parser("list", help="the schedules and their next run")
    delete = ssub.add_parser("delete", help="delete a schedule (the runs it started go on)")
    delete.add_argument("--id", type=SCHEDULE_ID, required=True)
    for p in (create, listing, delete):
        p.add_argument("--address", type=ADDRESS, default="localhost:7233")
        p.add_argument("--namespace", type=NAMESPACE, default="default")
    sched.set_defaults(func=cmd_schedule)
