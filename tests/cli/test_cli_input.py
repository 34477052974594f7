"""The CLI at its edges: a bad number is one line and exit 2 before anything starts; an unreachable
server is one line and exit 2; `marathon follow` waits for a server that is restarting, saying so,
and gives up after --server-wait; with --json, stdout holds the JSON alone."""
from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

import worker
from serving.dev_server import DevServer
from marathon_support import ROOT

pytestmark = pytest.mark.timeout(180)
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def marathon(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "marathon.py", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


@pytest.mark.parametrize("argv, flag", [
    (["run", "--problem", "mla_decode", "--hours", "-1"], "--hours"),
    (["run", "--problem", "mla_decode", "--hours", "abc"], "--hours"),
    (["run", "--problem", "mla_decode", "--hours", "inf"], "--hours"),
    (["run", "--problem", "mla_decode", "--max-tool-calls", "0"], "--max-tool-calls"),
    (["run", "--problem", "mla_decode", "--timeout", "-1"], "--timeout"),
    (["run", "--problem", "mla_decode", "--parallel", "0"], "--parallel"),
    (["run", "--problem", "mla_decode", "--target-speedup", "0"], "--target-speedup"),
    (["run", "--problem", "mla_decode", "--compact-every", "0"], "--compact-every"),
    (["schedule", "create", "--id", "x", "--problem", "mla_decode", "--context-budget", "-5"], "--context-budget"),
    (["eval", "--problem", "mla_decode", "--kernel", "starter", "--seeds", "0"], "--seeds"),
    (["eval", "--problem", "mla_decode", "--kernel", "starter", "--timeout", "0"], "--timeout"),
    (["dev", "--port", "70000"], "--port"),
    (["follow", "--workflow-id", "x", "--server-wait", "-1"], "--server-wait"),
    # past the bounds (workflows/limits.py): refused before anything starts
    (["run", "--problem", "mla_decode", "--timeout", "1e14"], "--timeout"),
    (["run", "--problem", "mla_decode", "--hours", "1e11"], "--hours"),
    (["run", "--problem", "mla_decode", "--max-tool-calls", "1000000000"], "--max-tool-calls"),
    (["run", "--problem", "mla_decode", "--server-wait", "1e12"], "--server-wait"),
    (["suite", "--problems", "docs/examples", "--hours-each", "1e9"], "--hours-each"),
    (["eval", "--problem", "mla_decode", "--kernel", "starter", "--reps", "10000000000"], "--reps"),
    # a malformed address: one line wherever one is taken
    (["runs", "--address", "127.0.0.1:99999"], "--address"),
    (["runs", "--address", ":7233x"], "--address"),
    (["report", "x", "--address", "localhost"], "--address"),
    (["follow", "--workflow-id", "x", "--address", "127.0.0.1:99999"], "--address"),
    (["run", "--problem", "mla_decode", "--address", ":7233x"], "--address"),
    (["schedule", "list", "--address", "host:0"], "--address"),
])
def test_a_bad_number_is_one_line_and_exit_2(argv, flag, tmp_path):
    # --address where the run would go: nothing may be contacted, nothing started
    res = marathon(*argv, "--state-dir", str(tmp_path)) if argv[0] == "run" else marathon(*argv)
    assert res.returncode == 2, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in res.stderr, res.stderr
    assert res.stdout == "" and not list(tmp_path.iterdir())  # nothing started, nothing written


def test_worker_refuses_a_malformed_address():
    res = subprocess.run([sys.executable, "worker.py", "--address", "127.0.0.1:99999"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env=ENV)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "--address" in res.stderr, res.stderr


def test_the_cli_sends_a_kernel_file_as_its_text(tmp_path):
    """The workflow input carries the user's kernel as text, labelled with its file's name, never its path."""
    from cli.args import spec_from_args
    from marathon import build_parser

    path = tmp_path / "my kernel.py"
    path.write_text("def mla_decode(q, kv):\n    return q\n")
    spec = spec_from_args(build_parser().parse_args(["run", "--problem", "mla_decode", "--kernel", str(path)]))
    assert spec.source == path.read_text() and spec.kernel == "my_kernel.py"
    assert str(tmp_path) not in spec.model_dump_json()


@pytest.mark.parametrize("detach", [False, True])
def test_an_unreachable_server_is_one_line_and_exit_2(detach):
    res = marathon("run", "--address", "127.0.0.1:1", "--problem", "mla_decode", *(["--detach"] if detach else []))
    assert res.returncode == 2, res
    assert res.stderr.strip() == "marathon run: cannot reach the Temporal server at 127.0.0.1:1: Connection refused"


def test_follow_gives_up_after_server_wait():
    t0 = time.monotonic()
    res = marathon("follow", "--address", "127.0.0.1:1", "--workflow-id", "x", "--server-wait", "2")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 2, res.stderr
    assert "waiting up to 2 s" in lines[0] and "did not answer for 2 s" in lines[1]
    assert time.monotonic() - t0 < 30


def _lines(proc: subprocess.Popen) -> "queue.Queue[str]":
    q: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [q.put(line) for line in proc.stderr], daemon=True).start()
    return q


def _wait_line(q: "queue.Queue[str]", text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            line = q.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"no line with {text!r} in {timeout} s; saw {seen}")


def test_follow_waits_across_a_server_restart(tmp_path):
    """The server SIGKILLed under a `marathon follow` and started again on the same state: follow says it
    waits, says when the server is back, and reports the run's end (here, a termination)."""
    srv = DevServer(db=tmp_path / "temporal.db").start()
    follow = None
    try:
        wf = f"follow-{uuid.uuid4().hex[:8]}"
        # no worker serves this queue: the run stays RUNNING until the test terminates it
        asyncio.run(_start(srv.address, wf))
        follow = subprocess.Popen([sys.executable, "marathon.py", "follow", "--address", srv.address, "--workflow-id",
                                   wf, "--server-wait", "60"], cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=ENV)
        lines = _lines(follow)
        time.sleep(3)
        assert follow.poll() is None
        os.killpg(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait()
        _wait_line(lines, "is not answering", 60)
        assert follow.poll() is None  # still waiting
        srv.start()
        asyncio.run(_terminate(srv.address, wf))
        follow.wait(timeout=60)
        rest = []
        while not lines.empty():
            rest.append(lines.get())
        assert follow.returncode == 1 and not any("Traceback" in x for x in rest), (follow.returncode, rest)
        assert any("answering again" in x for x in rest) and any("the run failed" in x for x in rest), rest
    finally:
        if follow is not None and follow.poll() is None:
            follow.kill()
        srv.stop()


async def _start(address: str, wf: str) -> None:
    client = await worker.connect(address)
    await client.start_workflow("KernelOptimization", {"problem": "mla_decode"}, id=wf,
                                task_queue=f"nobody-{uuid.uuid4().hex[:6]}")


async def _terminate(address: str, wf: str) -> None:
    client = await worker.connect(address)
    await client.get_workflow_handle(wf).terminate("test over")


# A command whose work writes to file descriptor 1 from below Python (as Temporal's core does when it logs
# a slow workflow task), starts a child that prints, and then prints its JSON.
NOISY_COMMAND = """
import argparse, json, os, subprocess, sys
import marathon

def work(args):
    os.write(1, b"a native log line\\n")
    subprocess.run(["echo", "a child's line"], check=True)
    print(json.dumps({"json": args.json}))
    return 0

def parser():
    ap = argparse.ArgumentParser(prog="marathon")
    ap.add_argument("--json", action="store_true")
    ap.set_defaults(func=work)
    return ap

marathon.build_parser = parser
sys.argv = ["marathon", *sys.argv[1:]]
marathon.cli()
"""


@pytest.mark.parametrize("json_flag", [True, False], ids=["json", "table-control"])
def test_json_output_is_alone_on_stdout(json_flag):
    out = subprocess.run([sys.executable, "-c", NOISY_COMMAND, *(["--json"] if json_flag else [])], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, env=ENV)
    assert out.returncode == 0, out.stderr[-2000:]
    if json_flag:
        assert out.stdout == '{"json": true}\n', out.stdout
        assert "a native log line" in out.stderr and "a child's line" in out.stderr
    else:  # without --json the descriptors stay as they are
        assert "a native log line" in out.stdout and "a child's line" in out.stdout
