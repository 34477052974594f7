"""The `marathon` command: a thin front over the evaluator (`eval`) and the Temporal runs (`run`, `dev`)."""
from __future__ import annotations

import argparse
import sys

from kernels.evaluator.evaluate import EvaluatorError, evaluate, request_for
from kernels.problems.spec import PROBLEM_NAMES, ShapeError, parse_shape, resolve_problem
from kernels.evaluator.verdict import Verdict


def _table(v: Verdict) -> str:
    lines = [f"{v.problem} / {v.kernel} on {v.device}" + (f" ({v.gpu.name}, driver {v.gpu.driver})" if v.gpu else "")
             + f": {v.status.upper()}", f"  {v.reason}"]
    if v.shapes:
        header = (f"  {'shape':<34} {'ok':<3} {'rel_err':>9} {'us':>10} {'graph us':>10} {'wall us':>10} "
                  f"{'roofline':>8}  speedups")
        lines += ["", header]
        for r in v.shapes:
            shape = ",".join(f"{k}={x}" for k, x in r.shape.items())
            graph = r.timing.graph_median_us if r.timing and r.timing.graph_median_us else None
            wall = r.timing.sync_wall_us if r.timing and r.timing.sync_wall_us else None
            sp = "  ".join(f"{k} {x:.2f}x ({r.baselines[k]:.1f} us)" for k, x in r.speedup.items())
            lines.append(f"  {shape:<34} {'yes' if r.correct else 'no':<3} "
                         f"{(f'{r.rel_err:.2e}' if r.rel_err is not None else '-'):>9} "
                         f"{(f'{r.latency_us:.2f}' if r.latency_us is not None else '-'):>10} "
                         f"{(f'{graph:.2f}' if graph else '-'):>10} "
                         f"{(f'{wall:.1f}' if wall else '-'):>10} "
                         f"{(f'{r.roofline_pct:.1f}%' if r.roofline_pct is not None else '-'):>8}  {sp}")
    if not v.timing_meaningful and any(r.latency_us for r in v.shapes):
        lines.append("  (CPU / Triton interpreter: times are not meaningful)")
    elif any(r.timing and r.timing.sync_wall_us for r in v.shapes):
        lines.append("  (us: device time per call, L2 flushed; graph: as a CUDA graph; wall: one call between two "
                     "device synchronisations, host launch cost included)")
    lines += [f"  flag: {f}" for f in v.flags]
    spent = ", ".join(f"{k} {t:.1f}" for k, t in sorted(v.phases_s.items(), key=lambda kv: -kv[1]) if t >= 0.05)
    lines.append(f"  torch {v.versions.get('torch')}, triton {v.versions.get('triton')}, {v.elapsed_s:.1f} s"
                 + (f" ({spent})" if spent else ""))
    if v.status != "ok" and v.log_tail.strip():
        lines += ["", "  candidate output (tail):"] + ["    " + x for x in v.log_tail.strip().splitlines()[-20:]]
    return "\n".join(lines)


def cmd_eval(args: argparse.Namespace) -> int:
    try:
        shapes = [parse_shape(s) for s in args.shape]
        name, problem_source = resolve_problem(args.problem)
        req = request_for(name, args.kernel, problem_source=problem_source, dtype=args.dtype,
                          device=args.device, shape_set=args.shapes, shapes=shapes,
                          timeout_s=args.timeout, mode=args.mode, seeds=args.seeds, reps=args.reps,
                          baselines=not args.no_baselines, only_baselines=args.baseline)
        verdict = evaluate(req)
    except (ShapeError, KeyError, FileNotFoundError, ValueError) as exc:
        print(f"marathon eval: {exc}", file=sys.stderr)
        return 2
    except EvaluatorError as exc:
        print(f"marathon eval: infrastructure error: {exc}", file=sys.stderr)
        return 3
    print(verdict.model_dump_json(indent=2) if args.json else _table(verdict))
    return 0 if verdict.ok else 1


class _Parser(argparse.ArgumentParser):
    """argparse, its errors on one line (the usage is one --help away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _number(kind: type, low: float, high: float | None = None, *, strict: bool = False):
    """An argparse type: a finite `kind` above `low` (or at least it, unless strict), at most `high`."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if (value <= low) if strict else (value < low):
            raise argparse.ArgumentTypeError(f"{text} must be {'above' if strict else 'at least'} {low:g}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{text} must be at most {high:g}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


POSITIVE, COUNT = _number(float, 0, strict=True), _number(int, 1)
PORT = _number(int, 1, 65535)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="marathon", description="Day-long, crash-proof Triton kernel optimization.")
    sub = ap.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="judge one kernel: policy, compile, correctness, timing against baselines")
    ev.add_argument("--problem", required=True, help=f"a built-in problem ({', '.join(PROBLEM_NAMES)}), its folder, or a KernelBench-format .py file")
    ev.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"),
                    help="the input dtype (default: the problem's; float32 for a KernelBench file)")
    ev.add_argument("--kernel", required=True, help="a file path, or a shipped kernel's name (starter, ...)")
    ev.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ev.add_argument("--shapes", default=None, choices=("smoke", "bench", "sweep"),
                    help="a named shape set (default: smoke on the CPU, bench on CUDA)")
    ev.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE,...",
                    help="an explicit shape, e.g. B=3,H=4,S=1000 (repeatable; replaces --shapes)")
    ev.add_argument("--timeout", type=POSITIVE, default=600.0, help="wall-clock seconds for the candidate's process")
    ev.add_argument("--mode", default="full", choices=("compile", "test", "full"))
    ev.add_argument("--seeds", type=COUNT, default=3, help="fresh random inputs per shape (at least 3 counts)")
    ev.add_argument("--reps", type=COUNT, default=None, help="timed calls (at least 20 on CUDA)")
    ev.add_argument("--no-baselines", action="store_true")
    ev.add_argument("--baseline", action="append", default=[], metavar="NAME",
                    help="time only this baseline (repeatable; default: all the problem offers)")
    ev.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    ev.set_defaults(func=cmd_eval)
    add_run_and_dev(sub)
    return ap


# ------------------------------------------------------------------------------ run and dev
# Temporal, the workers and the workflow are imported lazily: `marathon eval` needs none of them.
def _project_on_path() -> None:
    """worker.py sits beside this file: importable from the console script wherever it is run."""
    from pathlib import Path
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)


def _state_dir(path: str | None):
    from reports.local import state_dir
    return state_dir(path)


def spec_from_args(args: argparse.Namespace):
    """The RunSpec the flags describe (the same JSON `temporal workflow start --input` takes)."""
    from pydantic import ValidationError

    from workflows.models import describe_invalid

    try:
        return _spec_from_args(args)
    except ValidationError as err:  # the models' constraints, e.g. eval.timeout_s for --timeout
        raise ValueError(describe_invalid(err)) from None


def _spec_from_args(args: argparse.Namespace):
    from pathlib import Path

    from kernels.problems.spec import get_problem
    from workflows.models import Budgets, EvalSettings, ModelSettings, RunSpec

    name, problem_source = resolve_problem(args.problem)
    spec = get_problem(name, problem_source)
    if problem_source is not None and args.kernel == "starter":
        raise ValueError(f"--kernel: a problem file ({name}) ships no starter; give a candidate file with ModelNew")
    if problem_source is not None and args.device == "cpu" and not args.shape and args.shapes is None:
        spec.shapes("smoke")  # says that the file's own sizes are too large for the interpreter
    kernel, source = args.kernel, None
    if kernel not in spec.shipped_kernels:
        path = Path(kernel)
        if not path.is_file():
            raise ValueError(f"--kernel {kernel!r} is neither a file nor a shipped kernel of {args.problem} "
                             f"({', '.join(spec.shipped_kernels)})")
        source = path.read_text()
    model = ModelSettings(model=args.model or "", base_url=args.base_url, api_key_env=args.api_key_env)
    policy = args.policy
    if policy == "llm" and not model.configured:
        raise ValueError("--policy llm needs --model (and --base-url for a non-OpenAI endpoint)")
    memory = None
    if args.memory_from:
        from compaction.memory import Memory
        from workflows.models import RunReport
        report = RunReport.model_validate_json(Path(args.memory_from).read_text())
        if report.memory is None:
            raise ValueError(f"{args.memory_from} holds no memory")
        memory = Memory.model_validate(report.memory.model_dump())
    return RunSpec(problem=name, problem_source=problem_source, kernel=kernel if source is None else str(kernel),
                   source=source,
                   policy=policy, model=model, memory=memory,
                   budgets=Budgets(hours=args.hours, max_tool_calls=args.max_tool_calls,
                                   target_speedup=args.target_speedup),
                   eval=EvalSettings(device=args.device, shapes=args.shapes,
                                     shape_list=[spec.shape(parse_shape(s)) for s in args.shape],
                                     timeout_s=args.timeout, parallel=args.parallel,
                                     sweep_best=not args.no_sweep_check),
                   hints=list(args.hint), compact_every=args.compact_every, context_budget=args.context_budget,
                   gpu_task_queue=args.gpu_task_queue, agents=args.agents)


def _report_table(rep) -> str:
    lines = [f"{rep.problem} ({rep.policy}), workflow {rep.workflow_id}: {rep.stop_reason}",
             f"  {rep.tool_calls} tool calls, {rep.turns} turns, {rep.attempts} attempts, "
             f"{rep.continue_as_new} continue-as-new, {rep.compactions} compactions, {rep.hours:.2f} h"]
    if rep.tokens.calls:
        lines.append(f"  model: {rep.tokens.calls} calls, {rep.tokens.prompt_tokens} prompt + "
                     f"{rep.tokens.completion_tokens} completion tokens")
    if rep.best is None:
        lines.append("  best: no kernel with an ok verdict")
    else:
        b = rep.best
        sp = f"{b.speedup:.3f}x against the strongest baseline" if b.speedup is not None else "no baseline timed"
        lines += [f"  best: attempt {b.attempt}, {sp} (sha256 {b.sha256[:12]})", "", _table(b.verdict)]
        if rep.best_sweep is not None:
            sw = rep.best_sweep
            lines.append("  sweep shapes (correctness): " + ("correct on every shape" if sw.status == "ok"
                                                             else f"{sw.status}: {sw.reason}"))
    if rep.agents:
        lines += ["", "  agents:"]
        for a in rep.agents:
            sp = f"{a.best_speedup:.3f}x (attempt {a.best_attempt})" if a.best_speedup is not None else "no best"
            lines.append(f"  {a.agent:>5} {a.tool_calls:>4} tool calls  {sp:<24} {a.status}  [{a.workflow_id}]")
    tried = [a for a in rep.ledger if a.evals]
    if tried:
        lines += ["", "  attempts:"]
        for a in tried[-30:]:
            e = a.best_eval() or a.evals[-1]
            sp = f"{e.speedup:.3f}x vs {e.baseline}" if e.speedup is not None else ""
            lat = f"{e.latency_us:.1f} us" if e.latency_us is not None else ""
            cfg = ", ".join(f"{k}={v}" for k, v in (a.config or {}).items())
            lines.append(f"  {a.n:>5} {a.origin:<6} {e.status:<13} {lat:>12} {sp:<24} {cfg}")
    return "\n".join(lines)


class ServerGone(Exception):
    """The Temporal server did not answer within the time we wait for it."""


def _why(exc: BaseException) -> str:
    """A connection error in a few words: the OS's reason where the SDK's text holds one."""
    import re
    text = str(exc).strip()
    found = re.search(r'message: "([^"]+)"', text)
    if found:
        return found.group(1)
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def _server_down(exc: BaseException) -> bool:
    from temporalio.service import RPCError, RPCStatusCode
    if isinstance(exc, RPCError):
        return exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNKNOWN,
                              RPCStatusCode.CANCELLED)
    return isinstance(exc, RuntimeError) and str(exc).startswith("Failed client connect")


async def _while_server_up(call, address: str, wait_s: float, command: str):
    """`await call()`, and while the server does not answer (down, or restarting), say so once and try
    again, for up to `wait_s` seconds; then ServerGone."""
    import asyncio
    import time
    down_since = None
    while True:
        try:
            result = await call()
        except Exception as exc:
            if not _server_down(exc):
                if down_since is not None:
                    print(f"marathon {command}: the server at {address} is answering again", file=sys.stderr,
                          flush=True)
                raise
            now = time.monotonic()
            if down_since is None:
                down_since = now
                print(f"marathon {command}: the server at {address} is not answering ({_why(exc)}); waiting up to "
                      f"{wait_s:g} s for it (--server-wait)", file=sys.stderr, flush=True)
            elif now - down_since > wait_s:
                raise ServerGone(f"the server at {address} did not answer for {wait_s:g} s ({_why(exc)}); "
                                 f"the run, if it exists, goes on without us") from None
            await asyncio.sleep(1.0)
            continue
        if down_since is not None:
            print(f"marathon {command}: the server at {address} is answering again", file=sys.stderr, flush=True)
        return result


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

    from workflows.models import RunStatus

    seen: list[str] = []
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
        now = time.monotonic()
        if now - last_line > (10 if st.fault else 30):  # a fault is news: said more often, with its age
            best = f"{st.best_speedup:.3f}x @ {st.best_attempt}" if st.best_speedup is not None else "none yet"
            failing = f"; failing: {st.fault.line(datetime.now(timezone.utc))}" if st.fault else ""
            print(f"[{st.tool_calls}/{st.tool_calls_budget} tool calls, {st.hours_used:.2f}/{st.hours_budget:g} h, "
                  f"best {best}] {st.step}{failing}", file=out, flush=True)
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
            print(f"cannot count the evaluation workers ({_why(exc)}); --parallel {want} stands", file=out)
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
            print(f"marathon run: cannot reach the Temporal server at {address}: {_why(exc)}", file=sys.stderr)
            return 2
        spec = await _fit_parallel(client, spec, args.address is None, out)
        workers = None
        if args.address is None:
            workers = worker.build_workers(client, task_queue=args.task_queue, gpu_task_queue=args.gpu_task_queue,
                                           store=ArtifactStore(args.artifacts or state / "artifacts"))
            worker_task = asyncio.create_task(workers.run())
        try:
            try:
                await client.start_workflow(names.WORKFLOW_TYPE, spec, id=workflow_id, task_queue=args.task_queue,
                                            result_type=RunReport)
            except WorkflowAlreadyStartedError:
                print(f"marathon run: a run with workflow id {workflow_id!r} is already going on {address}",
                      file=sys.stderr)
                return 2
            except RPCError as exc:
                print(f"marathon run: the server at {address} refused the run: {_why(exc)}", file=sys.stderr)
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
        report = await _while_server_up(handle.result, address, server_wait_s, command)
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
        print(_report_table(report))
        if html is not None:
            print(f"\nreport: {html}", flush=True)
    return 0 if report.best is not None else 1


async def _follow_async(args: argparse.Namespace) -> int:
    from temporalio.service import RPCError, RPCStatusCode

    import worker

    out = sys.stderr if args.json else sys.stdout
    try:
        client = await _while_server_up(lambda: worker.connect(args.address, args.namespace), args.address,
                                        args.server_wait, "follow")
        await _while_server_up(client.get_workflow_handle(args.workflow_id).describe, args.address,
                               args.server_wait, "follow")
    except ServerGone as exc:
        print(f"marathon follow: {exc}", file=sys.stderr)
        return 2
    except RPCError as exc:
        why = (f"no run {args.workflow_id!r} on {args.address}" if exc.status == RPCStatusCode.NOT_FOUND
               else f"the server at {args.address} answered: {_why(exc)}")
        print(f"marathon follow: {why}", file=sys.stderr)
        return 2
    return await _report_when_done(client, args.workflow_id, args.json, out, "follow", args.address,
                                   args.server_wait)


def cmd_follow(args: argparse.Namespace) -> int:
    import asyncio
    _project_on_path()
    try:
        return asyncio.run(_follow_async(args))
    except KeyboardInterrupt:  # the run goes on without us
        print("marathon follow: stopped following (the run goes on)", file=sys.stderr)
        return 130


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio
    _project_on_path()
    try:
        if args.detach and args.address is None:
            raise ValueError("--detach needs --address: an embedded server ends with this process")
        spec = spec_from_args(args)
    except (ShapeError, KeyError, ValueError, OSError) as exc:
        print(f"marathon run: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run_async(args, spec))
    except KeyboardInterrupt:
        print("marathon run: interrupted", file=sys.stderr)
        return 130


def cmd_dev(args: argparse.Namespace) -> int:
    _project_on_path()
    import worker
    from workflows import names

    from reports.local import DEV_DB, DatabaseLock

    state = _state_dir(args.state_dir)
    server = worker.DevServer(port=args.port, ui_port=args.ui_port, db=state / DEV_DB, ip=args.ip,
                              log=state / "temporal.log")
    lock = DatabaseLock(state / DEV_DB)  # `marathon runs` and `report` then ask this server, not the file
    if not lock.try_acquire():
        print(f"marathon dev: {state / DEV_DB} is served already (on {lock.holder_address()})", file=sys.stderr)
        return 2
    server.start()
    lock.publish(server.address)
    try:
        print(f"Temporal dev server on {server.address} (state in {state / 'temporal.db'})\n"
              f"Web UI: http://{args.ip if args.ip != '0.0.0.0' else 'localhost'}:{args.ui_port}\n"
              f"search attributes: {', '.join(names.SEARCH_ATTRIBUTES)}\n"
              f"start a run:  temporal workflow start --address {server.address} --task-queue {names.TASK_QUEUE} "
              f"--type {names.WORKFLOW_TYPE} --workflow-id my-run --input '{{\"problem\": \"mla_decode\"}}'", flush=True)
        if args.no_worker:
            server.proc.wait()
            return 0
        wargs = ["--address", server.address, "--artifacts", str(args.artifacts or state / "artifacts"),
                 "--gpus", args.gpus]
        try:
            return worker.main(wargs)
        except KeyboardInterrupt:
            return 0
    finally:
        server.stop()
        lock.release()


async def _schedule_async(args: argparse.Namespace, spec) -> int:
    from temporalio.client import (Schedule, ScheduleActionStartWorkflow, ScheduleAlreadyRunningError,
                                   ScheduleOverlapPolicy, SchedulePolicy, ScheduleSpec, ScheduleUpdate)

    import worker
    from workflows import names

    client = await worker.connect(args.address, args.namespace)
    if args.schedule_command == "list":
        async for entry in await client.list_schedules():
            info = entry.info
            nxt = info.next_action_times[0].isoformat() if info and info.next_action_times else "-"
            print(f"{entry.id}  next run {nxt}")
        return 0
    if args.schedule_command == "delete":
        await client.get_schedule_handle(args.id).delete()
        print(f"deleted schedule {args.id}")
        return 0
    suite = not hasattr(spec, "problem")  # a SuiteSpec (workflows/suite.py): the suite workflow
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(names.SUITE_WORKFLOW_TYPE if suite else names.WORKFLOW_TYPE, spec,
                                           id=args.id, task_queue=args.task_queue),
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


def cmd_report(args: argparse.Namespace) -> int:
    import asyncio
    _project_on_path()
    from reports.collect import ReportError
    from reports.make import Unreachable, report
    try:
        html = asyncio.run(report(args.workflow_id, _state_dir(args.state_dir), args.address, args.out,
                                  args.artifacts, args.namespace))
    except (ReportError, ValueError, OSError) as exc:
        why = f" ({_why(exc.__cause__)})" if isinstance(exc, Unreachable) and exc.__cause__ else ""
        print(f"marathon report: {exc}{why}", file=sys.stderr)
        return 2
    print(html)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    import asyncio
    _project_on_path()
    from reports.collect import ReportError
    from reports.make import Unreachable
    from reports.runs import list_runs, parse_since, table
    try:
        since = parse_since(args.since) if args.since else None
        rows = asyncio.run(list_runs(_state_dir(args.state_dir), args.address, args.problem, since, args.namespace))
    except (ReportError, ValueError, OSError) as exc:
        why = f" ({_why(exc.__cause__)})" if isinstance(exc, Unreachable) and exc.__cause__ else ""
        print(f"marathon runs: {exc}{why}", file=sys.stderr)
        return 2
    if args.json:
        import json
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
    else:
        print(table(rows))
    return 0


def cmd_suite(args: argparse.Namespace) -> int:
    import asyncio
    _project_on_path()
    from marathon_suite import run_suite, suite_spec_from_args
    try:
        if args.detach and args.address is None:
            raise ValueError("--detach needs --address: an embedded server ends with this process")
        spec = suite_spec_from_args(args, spec_from_args)
    except (ShapeError, KeyError, ValueError, OSError) as exc:
        print(f"marathon suite: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run_suite(args, spec))
    except KeyboardInterrupt:
        print("marathon suite: stopped following (the suite goes on where a server runs it)", file=sys.stderr)
        return 130


def cmd_schedule(args: argparse.Namespace) -> int:
    import asyncio
    _project_on_path()
    spec = None
    if args.schedule_command == "create":
        try:
            if args.problems:
                from marathon_suite import suite_spec_from_args
                spec = suite_spec_from_args(args, spec_from_args)
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


SERVER_WAIT_S = 600.0  # a restart of `marathon dev` takes seconds, a machine's reboot minutes
TASK_QUEUE, GPU_TASK_QUEUE = "marathon", "marathon-gpu"  # workflows/names.py (not imported: eval stays light)


def _add_spec_flags(run, problem: str = "one") -> None:
    """The flags that describe a run (RunSpec): shared by `run`, `suite` and `schedule create`.
    problem: "one" (--problem), "suite" (--problems) or "either" (schedule create)."""
    which = run.add_mutually_exclusive_group(required=True)
    if problem in ("one", "either"):
        which.add_argument("--problem", help=f"a built-in problem ({', '.join(PROBLEM_NAMES)}), its folder, or a KernelBench-format .py file")
    if problem in ("suite", "either"):
        which.add_argument("--problems", metavar="DIR_OR_GLOB",
                           help="a suite: one run per KernelBench-format file (each starting from <name>_kernel.py "
                                "beside it), as child workflows of one suite workflow")
        run.add_argument("--hours-each", type=float, default=None, help="a suite's budget per problem (default: --hours)")
    run.add_argument("--kernel", default="starter", help="the starting kernel: a shipped kernel's name or a file")
    run.add_argument("--policy", choices=("llm", "tuner"), default=None,
                     help="default: llm when --model is given, otherwise tuner")
    run.add_argument("--model", default=None, help="model name at the endpoint")
    run.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint (vLLM, SGLang, Ollama, ...)")
    run.add_argument("--api-key-env", default="OPENAI_API_KEY",
                     help="the NAME of the environment variable (in the workers) that holds the key")
    run.add_argument("--hours", type=POSITIVE, default=24.0)
    run.add_argument("--max-tool-calls", type=COUNT, default=1000)
    run.add_argument("--target-speedup", type=POSITIVE, default=None, help="stop once the best kernel reaches this")
    run.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    run.add_argument("--shapes", default=None, choices=("smoke", "bench", "sweep"),
                     help="default: smoke on the CPU, bench on CUDA")
    run.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE,...")
    run.add_argument("--timeout", type=POSITIVE, default=600.0, help="wall-clock seconds for one candidate's process")
    run.add_argument("--parallel", type=_number(int, 1, 64), default=1,
                     help="tuner: configurations profiled at once, one per GPU worker (`marathon dev --gpus auto` "
                          "starts one per GPU; an embedded run has one); a suite: problems run at once")
    run.add_argument("--agents", type=_number(int, 1, 64), default=1,
                     help="islands: this many agents as child workflows of the run, each with its own context and "
                          "a share of the tool calls, sharing the best kernel and the failures (the tuner splits "
                          "its space among them)")
    run.add_argument("--no-sweep-check", action="store_true",
                     help="do not test the best kernel on the problem's sweep shapes after the run (a CUDA run does)")
    run.add_argument("--hint", action="append", default=[], help="a hint for the model (repeatable)")
    run.add_argument("--compact-every", type=COUNT, default=40, help="tool calls between compactions")
    run.add_argument("--context-budget", type=COUNT, default=48000, help="tokens a prompt may use")
    run.add_argument("--memory-from", default=None, metavar="REPORT.json",
                     help="start from the memory of an earlier run's --json report (e.g. a tuner run's)")
    run.add_argument("--gpu-task-queue", default=GPU_TASK_QUEUE)


def add_run_and_dev(sub) -> None:
    run = sub.add_parser("run", help="start an optimization run and follow it to its report")
    _add_spec_flags(run)
    run.add_argument("--address", default=None,
                     help="a Temporal server whose workers run it (e.g. `marathon dev`); default: an embedded one")
    run.add_argument("--namespace", default="default")
    run.add_argument("--task-queue", default=TASK_QUEUE)
    run.add_argument("--workflow-id", default=None)
    run.add_argument("--state-dir", default=None, help="default: ~/.local/state/kernel-marathon")
    run.add_argument("--artifacts", default=None, help="artifact store of the embedded worker (default: STATE/artifacts)")
    run.add_argument("--detach", action="store_true", help="start it and print its workflow id (needs --address)")
    run.add_argument("--json", action="store_true", help="print the final report as one JSON object")
    run.add_argument("--server-wait", type=POSITIVE, default=SERVER_WAIT_S, metavar="SECONDS",
                     help=f"how long to wait for a server (--address) that is restarting (default {SERVER_WAIT_S:g})")
    run.set_defaults(func=cmd_run)

    suite = sub.add_parser("suite", help="one run per problem file of a folder, as child workflows of one suite "
                                         "workflow; reports fast_p and the geometric-mean speedup")
    _add_spec_flags(suite, problem="suite")
    for flag, kw in (("--address", {"default": None}), ("--namespace", {"default": "default"}),
                     ("--task-queue", {"default": TASK_QUEUE}), ("--workflow-id", {"default": None}),
                     ("--state-dir", {"default": None}), ("--artifacts", {"default": None}),
                     ("--detach", {"action": "store_true"}), ("--json", {"action": "store_true"})):
        suite.add_argument(flag, **kw)
    suite.set_defaults(func=cmd_suite)

    fol = sub.add_parser("follow", help="follow a run already started (after --detach, or after a restart of the "
                                        "server and workers) to its report")
    fol.add_argument("--workflow-id", required=True)
    fol.add_argument("--address", default="localhost:7233")
    fol.add_argument("--namespace", default="default")
    fol.add_argument("--json", action="store_true", help="print the final report as one JSON object")
    fol.add_argument("--server-wait", type=POSITIVE, default=SERVER_WAIT_S, metavar="SECONDS",
                     help=f"how long to wait for a server that is down or restarting (default {SERVER_WAIT_S:g})")
    fol.set_defaults(func=cmd_follow)

    dev = sub.add_parser("dev", help="the Temporal dev server (SQLite state, Web UI) and the workers")
    dev.add_argument("--state-dir", default=None, help="default: ~/.local/state/kernel-marathon")
    dev.add_argument("--ip", default="127.0.0.1")
    dev.add_argument("--port", type=PORT, default=7233)
    dev.add_argument("--ui-port", type=PORT, default=8233)
    dev.add_argument("--artifacts", default=None, help="default: STATE/artifacts")
    dev.add_argument("--gpus", default="auto", help="auto: one evaluation worker per GPU; none; or a list like 0,1")
    dev.add_argument("--no-worker", action="store_true", help="the server only")
    dev.set_defaults(func=cmd_dev)

    rep = sub.add_parser("report", help="a run's report folder: report.html (progress plots, attempts), report.md, "
                                        "attempts.csv, notebook.md, best_kernel.py, best_verdict.json")
    rep.add_argument("workflow_id")
    rep.add_argument("--out", default=None, help="the folder to write (default: STATE/reports/WORKFLOW_ID)")
    rep.add_argument("--address", default=None,
                     help="a Temporal server that holds the run; default: the databases under --state-dir")
    rep.add_argument("--namespace", default="default")
    rep.add_argument("--state-dir", default=None, help="default: ~/.local/state/kernel-marathon")
    rep.add_argument("--artifacts", default=None, help="the run's artifact store (default: STATE/artifacts)")
    rep.set_defaults(func=cmd_report)

    runs = sub.add_parser("runs", help="what ran: id, problem, policy, status, hours, tool calls, best speedup, report")
    runs.add_argument("--address", default=None,
                      help="a Temporal server to ask; default: the databases under --state-dir")
    runs.add_argument("--namespace", default="default")
    runs.add_argument("--state-dir", default=None, help="default: ~/.local/state/kernel-marathon")
    runs.add_argument("--problem", default=None, help="only this problem's runs")
    runs.add_argument("--since", default=None, metavar="AGE", help="only runs started within AGE (90m, 24h, 3d, 1w)")
    runs.add_argument("--json", action="store_true", help="one JSON list")
    runs.set_defaults(func=cmd_runs)

    sched = sub.add_parser("schedule", help="nightly (or any cron) runs as Temporal schedules")
    ssub = sched.add_subparsers(dest="schedule_command", required=True)
    create = ssub.add_parser("create", help="create or replace a schedule that starts a run")
    create.add_argument("--id", required=True, help="the schedule id; each run's workflow id starts with it")
    create.add_argument("--cron", default="0 22 * * *", help="when to start a run (default: 22:00 UTC daily)")
    _add_spec_flags(create, problem="either")
    create.add_argument("--task-queue", default=TASK_QUEUE)
    listing = ssub.add_parser("list", help="the schedules and their next run")
    delete = ssub.add_parser("delete", help="delete a schedule (the runs it started go on)")
    delete.add_argument("--id", required=True)
    for p in (create, listing, delete):
        p.add_argument("--address", default="localhost:7233")
        p.add_argument("--namespace", default="default")
    sched.set_defaults(func=cmd_schedule)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


def cli() -> None:
    """The command line's entry point: main(), then out without the interpreter's finalization. After a
    Temporal client was used, the SDK's core threads can abort an exiting interpreter ("Fatal Python
    error: PyGILState_Release", seen with temporalio 1.35 in `marathon follow`) once the report is
    already printed, turning success into exit status 134."""
    import os
    try:
        code = main()
    except SystemExit as exc:  # argparse errors and --help
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    cli()
