"""`marathon run` and `marathon follow`: start a run (on an embedded dev server and workers, or on
--address), follow its lab notebook live, and print its report when it ends. Temporal, the workers and
the workflow are imported lazily: `marathon eval` needs none of them."""
from __future__ import annotations

import argparse
import sys

from cli.args import (ADDRESS, FOLDER, NAMESPACE, SECONDS, SERVER_WAIT_S, TASK_QUEUE_NAME, WORKFLOW_ID, _add_spec_flags,
                      _state_dir, spec_from_args)
from cli.server import ServerGone, while_server_up, why
from cli.tables import CPU_LINE, progress_line, run_report_table
from kernels.problems.spec import ShapeError
from workflows.names import TASK_QUEUE


async def _pause(stop, seconds: float) -> None:
    import asyncio
    import contextlib
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _follow(client, workflow_id: str, out, stop) -> None:
    """Live progress: the run's lab notebook as it grows, and a status line now and then, until `stop`
    is set. It stops between queries, never inside one: a query cancelled in flight leaves the SDK's
    core thread to call back into an interpreter that is exiting, which aborts the process."""
    import time
    from datetime import datetime, timezone

    from workflows.models import BestReport, RunStatus

    seen: list[str] = []
    best_of: int | None = None  # the attempt whose verdict `best_verdict` is
    best_verdict = None
    last_line = 0.0
    started = time.monotonic()
    warned = False
    handle = client.get_workflow_handle(workflow_id)  # the latest run: follows continue-as-new
    while not stop.is_set():
        try:
            st = await handle.query("status", result_type=RunStatus)
        except Exception:  # between runs of a continue-as-new, or no worker has picked it up yet
            if not warned and time.monotonic() - started > 20:
                print("  (no worker has answered yet: is `marathon dev` or `python worker.py` running for this "
                      "server and task queue?)", file=out, flush=True)
                warned = True
            await _pause(stop, 1.0)
            continue
        new = st.notebook
        if seen and new[: len(seen)] != seen:  # the window moved: print what we have not printed
            overlap = next((i for i in range(len(seen)) if new[: len(seen) - i] == seen[i:]), len(seen))
            new_lines = new[len(seen) - overlap:]
        else:
            new_lines = new[len(seen):]
        for line in new_lines:
            print(f"  {line}", file=out, flush=True)
        seen = new
        if st.best_attempt is not None and st.best_attempt != best_of:  # a new best: is it timed on a CPU?
            try:
                best = await handle.query("best", result_type=BestReport | None)
            except Exception:  # asked again at the next round
                best = None
            if best is not None:
                if best_verdict is None and not best.verdict.timing_meaningful:
                    print(f"  {CPU_LINE}", file=out, flush=True)  # once, when the first time is known
                best_of, best_verdict = best.attempt, best.verdict
        now = time.monotonic()
        if now - last_line > (10 if st.fault else 30):  # a fault is news: said more often, with its age
            failing = f"; failing: {st.fault.line(datetime.now(timezone.utc))}" if st.fault else ""
            print(progress_line(st, best_verdict if best_of == st.best_attempt else None, failing), file=out,
                  flush=True)
            last_line = now
        if st.phase == "finished":
            return
        await _pause(stop, 2.0)


async def _fit_parallel(client, spec, embedded: bool, out):
    """--parallel above the evaluation workers there are cannot run faster: say so and use what there is.
    An embedded run has one; on a server, the distinct pollers of the GPU queue (none yet: workers may
    still be starting, so the number stands)."""
    want = spec.eval.parallel
    if want <= 1:
        return spec
    if embedded:
        have = 1
    else:
        from temporalio.api.enums.v1 import TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
        try:
            resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
                namespace=client.namespace, task_queue=TaskQueue(name=spec.gpu_task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY))
            have = len({p.identity for p in resp.pollers})
        except Exception as exc:  # an older server: the number stands
            print(f"cannot count the evaluation workers ({why(exc)}); --parallel {want} stands", file=out)
            return spec
        if have == 0:
            print(f"no evaluation worker polls {spec.gpu_task_queue} yet; --parallel {want} stands", file=out)
            return spec
    if want <= have:
        return spec
    print(f"--parallel {want} reduced to {have}: {have} evaluation worker{'s' if have != 1 else ''} "
          f"serve{'s' if have == 1 else ''} {spec.gpu_task_queue}", file=out, flush=True)
    return spec.model_copy(update={"eval": spec.eval.model_copy(update={"parallel": have})})


async def _run_async(args: argparse.Namespace, spec) -> int:
    import asyncio
    import contextlib
    import uuid

    from temporalio.exceptions import WorkflowAlreadyStartedError
    from temporalio.service import RPCError

    import worker
    from activities.artifacts import ArtifactStore
    from reports.runs import STARTED_BY, caller
    from workflows import names
    from workflows.models import RunReport

    out = sys.stderr if args.json else sys.stdout
    state = _state_dir(args.state_dir)
    workflow_id = args.workflow_id or f"{spec.problem}-{spec.resolved_policy()}-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        address = args.address
        if address is None:
            from reports.local import embedded_server
            print("starting an embedded Temporal dev server and workers for this run ...", file=out, flush=True)
            try:  # its own database: `marathon runs` and `report` read it later
                address = stack.enter_context(embedded_server(state, workflow_id)).address
            except ValueError as exc:
                print(f"marathon run: {exc}", file=sys.stderr)
                return 2
        try:
            client = await worker.connect(address, args.namespace)
        except RuntimeError as exc:
            print(f"marathon run: cannot reach the Temporal server at {address}: {why(exc)}", file=sys.stderr)
            return 2
        spec = await _fit_parallel(client, spec, args.address is None, out)
        workers = None
        if args.address is None:
            if spec.model.configured and spec.model.api_key_env:  # this process is the worker: its user chose both
                from activities.model import allow_key
                allow_key(spec.model.api_key_env, spec.model.base_url)
            workers = worker.build_workers(client, task_queue=args.task_queue, gpu_task_queue=args.gpu_task_queue,
                                           store=ArtifactStore(args.artifacts or state / "artifacts"))
            worker_task = asyncio.create_task(workers.run())
        try:
            try:
                await client.start_workflow(names.WORKFLOW_TYPE, spec, id=workflow_id, task_queue=args.task_queue,
                                            result_type=RunReport, memo={STARTED_BY: caller()})
            except WorkflowAlreadyStartedError:
                print(f"marathon run: a run with workflow id {workflow_id!r} is already going on {address}",
                      file=sys.stderr)
                return 2
            except RPCError as exc:
                print(f"marathon run: the server at {address} refused the run: {why(exc)}", file=sys.stderr)
                return 2
            print(f"started {workflow_id} ({spec.resolved_policy()} policy) on {address}", file=out, flush=True)
            if args.detach:
                print(workflow_id)
                return 0
            return await _report_when_done(client, workflow_id, args.json, out, "run", address, args.server_wait,
                                           report_to=(state, args.artifacts or state / "artifacts"))
        finally:
            if workers is not None:
                await workers.shutdown()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(worker_task, 30)


async def _report_when_done(client, workflow_id: str, as_json: bool, out, command: str, address: str,
                            server_wait_s: float, report_to: tuple | None = None) -> int:
    """Follow a run to its end (live progress on `out`), then print its report; the exit status says
    whether it found a kernel. `handle.result` follows continue-as-new to the last segment, and waits
    out a restart of the server (up to `server_wait_s`). With `report_to` (the state directory and the
    artifact store) the report folder is written too, its report.html's path printed last (with
    `as_json`: in the JSON as `report`, and on stderr)."""
    import asyncio
    import contextlib

    from temporalio.client import WorkflowFailureError

    from workflows.models import RunReport

    handle = client.get_workflow_handle(workflow_id, result_type=RunReport)
    stop = asyncio.Event()
    follow = asyncio.create_task(_follow(client, workflow_id, out, stop))
    try:
        report = await while_server_up(handle.result, address, server_wait_s, command)
    except WorkflowFailureError as exc:
        print(f"marathon {command}: the run failed: {exc.cause or exc}", file=sys.stderr)
        return 1
    except ServerGone as exc:
        print(f"marathon {command}: {exc}", file=sys.stderr)
        return 2
    finally:
        stop.set()  # and let its last query finish (see _follow)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(follow, 30)
    html = None
    if report_to is not None:
        try:  # (a host without matplotlib or jinja2 still gets the run's outcome)
            from reports.make import write_for
            html = await write_for(client, workflow_id, report_to[0], artifacts=report_to[1])
        except Exception as exc:  # the run's outcome stands without its report folder
            print(f"marathon {command}: the report folder was not written: {exc}", file=sys.stderr)
    if as_json:
        data = report.model_dump(mode="json")
        if html is not None:
            data["report"] = str(html)
        import json
        print(json.dumps(data, indent=2), flush=True)
        if html is not None:
            print(f"report: {html}", file=sys.stderr, flush=True)
    else:
        print(run_report_table(report))
        if html is not None:
            print(f"\nreport: {html}", flush=True)
    return 0 if report.best is not None else 1


async def _follow_async(args: argparse.Namespace) -> int:
    from temporalio.service import RPCError, RPCStatusCode

    import worker

    out = sys.stderr if args.json else sys.stdout
    try:
        client = await while_server_up(lambda: worker.connect(args.address, args.namespace), args.address,
                                       args.server_wait, "follow")
        await while_server_up(client.get_workflow_handle(args.workflow_id).describe, args.address,
                              args.server_wait, "follow")
    except ServerGone as exc:
        print(f"marathon follow: {exc}", file=sys.stderr)
        return 2
    except RPCError as exc:
        reason = (f"no run {args.workflow_id!r} on {args.address}" if exc.status == RPCStatusCode.NOT_FOUND
                  else f"the server at {args.address} answered: {why(exc)}")
        print(f"marathon follow: {reason}", file=sys.stderr)
        return 2
    return await _report_when_done(client, args.workflow_id, args.json, out, "follow", args.address,
                                   args.server_wait)


def cmd_follow(args: argparse.Namespace) -> int:
    import asyncio
    try:
        return asyncio.run(_follow_async(args))
    except KeyboardInterrupt:  # the run goes on without us
        print("marathon follow: stopped following (the run goes on)", file=sys.stderr)
        return 130


def start(command: str, args: argparse.Namespace, build_spec, run, interrupted: str) -> int:
    """A run or a suite: the spec from the arguments (bad input: one line, exit 2), then `run` until it
    ends or Ctrl-C (exit 130, saying `interrupted`)."""
    import asyncio
    try:
        if args.detach and args.address is None:
            raise ValueError("--detach needs --address: an embedded server ends with this process")
        spec = build_spec()
    except (ShapeError, KeyError, ValueError, OSError) as exc:
        print(f"marathon {command}: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(args, spec))
    except KeyboardInterrupt:
        print(f"marathon {command}: {interrupted}", file=sys.stderr)
        return 130


def cmd_run(args: argparse.Namespace) -> int:
    return start("run", args, lambda: spec_from_args(args), _run_async, "interrupted")


def add_run_parser(sub) -> None:
    run = sub.add_parser("run", help="start an optimization run and follow it to its report")
    _add_spec_flags(run)
    run.add_argument("--address", type=ADDRESS, default=None,
                     help="a Temporal server whose workers run it (e.g. `marathon dev`); default: an embedded one")
    run.add_argument("--namespace", type=NAMESPACE, default="default")
    run.add_argument("--task-queue", type=TASK_QUEUE_NAME, default=TASK_QUEUE)
    run.add_argument("--workflow-id", type=WORKFLOW_ID, default=None)
    run.add_argument("--state-dir", type=FOLDER, default=None, help="default: ~/.local/state/kernel-marathon")
    run.add_argument("--artifacts", type=FOLDER, default=None, help="artifact store of the embedded worker (default: STATE/artifacts)")
    run.add_argument("--detach", action="store_true", help="start it and print its workflow id (needs --address)")
    run.add_argument("--json", action="store_true", help="print the final report as one JSON object")
    run.add_argument("--server-wait", type=SECONDS, default=SERVER_WAIT_S, metavar="SECONDS",
                     help=f"how long to wait for a server (--address) that is restarting (default {SERVER_WAIT_S:g})")
    run.set_defaults(func=cmd_run)


def add_follow_parser(sub) -> None:
    fol = sub.add_parser("follow", help="follow a run already started (after --detach, or after a restart of the "
                                        "server and workers) to its report")
    fol.add_argument("--workflow-id", type=WORKFLOW_ID, required=True)
    fol.add_argument("--address", type=ADDRESS, default="localhost:7233")
    fol.add_argument("--namespace", type=NAMESPACE, default="default")
    fol.add_argument("--json", action="store_true", help="print the final report as one JSON object")
    fol.add_argument("--server-wait", type=SECONDS, default=SERVER_WAIT_S, metavar="SECONDS",
                     help=f"how long to wait for a server that is down or restarting (default {SERVER_WAIT_S:g})")
    fol.set_defaults(func=cmd_follow)
