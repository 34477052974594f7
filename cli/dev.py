"""`marathon dev`: the Temporal dev server (SQLite state under the state directory, Web UI) and the
workers, in the foreground until Ctrl-C."""
from __future__ import annotations

import argparse
import sys

from cli.args import FOLDER, GPUS, LISTEN_IP, PORT, _state_dir


def cmd_dev(args: argparse.Namespace) -> int:
    import worker
    from reports.local import DEV_DB, DatabaseLock
    from serving.dev_server import DevServer, PortTaken
    from workflows import names

    state = _state_dir(args.state_dir)
    if args.ip not in ("127.0.0.1", "::1", "localhost"):
        print(f"marathon dev: warning: serving on {args.ip} with no authentication: anyone who reaches it can start "
              "runs on these workers and send them signals. Beyond loopback, use a Temporal server with mTLS or an "
              "API key (docs/threat-model.md).", file=sys.stderr)
    server = DevServer(port=args.port, ui_port=args.ui_port, db=state / DEV_DB, ip=args.ip,
                       log=state / "temporal.log")
    lock = DatabaseLock(state / DEV_DB)  # `marathon runs` and `report` then ask this server, not the file
    if not lock.try_acquire():
        print(f"marathon dev: {state / DEV_DB} is served already (on {lock.holder_address()})", file=sys.stderr)
        return 2
    try:
        server.start()
    except PortTaken as exc:  # a port given here that another process holds: say so in one line
        lock.release()
        print(f"marathon dev: {exc}", file=sys.stderr)
        return 2
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


def add_parser(sub) -> None:
    dev = sub.add_parser("dev", help="the Temporal dev server (SQLite state, Web UI) and the workers")
    dev.add_argument("--state-dir", type=FOLDER, default=None, help="default: ~/.local/state/kernel-marathon")
    dev.add_argument("--ip", type=LISTEN_IP, default="127.0.0.1",
                     help="the address the server listens on; beyond loopback it has no authentication (a warning says so)")
    dev.add_argument("--port", type=PORT, default=7233)
    dev.add_argument("--ui-port", type=PORT, default=8233)
    dev.add_argument("--artifacts", type=FOLDER, default=None, help="default: STATE/artifacts")
    dev.add_argument("--gpus", type=GPUS, default="auto", help="auto: one evaluation worker per GPU; none; or a list like 0,1")
    dev.add_argument("--no-worker", action="store_true", help="the server only")
    dev.set_defaults(func=cmd_dev)
