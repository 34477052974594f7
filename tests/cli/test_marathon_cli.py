"""The CLI: `marathon run` (embedded dev server and worker, a tuner run end to end on the CPU, the JSON
report), and the README's `temporal workflow start` against `marathon dev`."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving.dev_server import free_port, temporal_binary
from marathon_support import ROOT

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
TEMPORAL = temporal_binary()


def test_marathon_run_tuner_end_to_end_json(tmp_path):
    out = subprocess.run([sys.executable, "marathon.py", "run", "--problem", "mla_decode", "--device", "cpu",
                          "--max-tool-calls", "5", "--json", "--state-dir", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["policy"] == "tuner" and report["tool_calls"] == 5
    assert report["attempts"] == 3 and report["continue_as_new"] == 0 and report["workflow_id"]
    best = report["best"]
    assert best["verdict"]["status"] == "ok" and "def mla_decode" in best["source"]
    assert best["attempt"] in (0, 1, 2) and best["verdict"]["problem"] == "mla_decode"
    configs = [a["config"] for a in report["ledger"]]
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == 3  # three distinct configurations
    # on a CPU the best is the correct kernel with the lowest interpreter time, not the highest (noisy) speedup
    ok = [(e["latency_us"], a["n"]) for a in report["ledger"] for e in a["evals"] if e["status"] == "ok"]
    assert best["attempt"] == min(ok)[1]
    assert "profile attempt 0" in out.stderr  # live progress went to stderr
    assert "CPU: every time here is the Triton interpreter's on a CPU" in out.stderr
    # the report folder, written by the run itself: in the JSON, and the last line on stderr
    html = Path(report["report"])
    assert html == tmp_path / "reports" / report["workflow_id"] / "report.html" and html.is_file()
    assert out.stderr.strip().splitlines()[-1] == f"report: {html}"
    assert (html.parent / "best_kernel.py").read_text().endswith(best["source"])
    # the embedded run kept its database: `marathon runs` lists it from the state directory
    runs = subprocess.run([sys.executable, "marathon.py", "runs", "--state-dir", str(tmp_path), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert runs.returncode == 0, runs.stderr
    [row] = json.loads(runs.stdout)
    assert row["workflow_id"] == report["workflow_id"] and row["status"] == "COMPLETED" and row["tool_calls"] == 5
    assert row["report"] == str(html.resolve())


def _temporal(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([TEMPORAL, *args], capture_output=True, text=True, timeout=timeout)


def test_temporal_workflow_start_against_marathon_dev(tmp_path):
    dev, addr = _start_dev(tmp_path)  # once its worker polls
    try:
        # the README's command, with a budget of one tool call to keep CI short
        started = _temporal("workflow", "start", "--address", addr, "--task-queue", "marathon",
                            "--type", "KernelOptimization", "--workflow-id", "readme-run",
                            "--input", '{"problem": "mla_decode", "budgets": {"max_tool_calls": 1}}')
        assert started.returncode == 0, started.stderr
        result = _temporal("workflow", "result", "--address", addr, "--workflow-id", "readme-run", "-o", "json",
                           timeout=300)
        assert result.returncode == 0, result.stderr
        closed = json.loads(result.stdout)
        assert closed["status"] == "COMPLETED"
        report = closed["closeEvent"]["workflowExecutionCompletedEventAttributes"]["result"][0]
        assert report["tool_calls"] == 1 and report["policy"] == "tuner" and report["best"]["attempt"] == 0
        assert report["best"]["verdict"]["status"] == "ok"
        status = _temporal("workflow", "query", "--address", addr, "--workflow-id", "readme-run", "--name", "status",
                           "-o", "json")
        assert status.returncode == 0 and '"phase":"finished"' in status.stdout.replace(" ", "").replace("\n", "")
        listed = _temporal("workflow", "list", "--address", addr, "--query",
                           'MarathonProblem = "mla_decode" AND MarathonToolCalls = 1', "-o", "json")
        assert listed.returncode == 0 and "readme-run" in listed.stdout, listed.stdout + listed.stderr
        assert (tmp_path / "temporal.db").exists()
    finally:
        dev.send_signal(signal.SIGINT)
        try:
            dev.wait(timeout=30)
        except subprocess.TimeoutExpired:
            dev.kill()
            dev.wait()


def _start_dev(state) -> tuple[subprocess.Popen, str]:
    """`marathon dev` in a process group of its own (server and workers) on fresh ports, once its worker
    polls; its address. Ports picked here can be taken by another process before the server binds them
    (it then exits, saying so): picked again, up to 5 times."""
    for _ in range(5):
        port, ui = free_port(), free_port()
        dev = subprocess.Popen([sys.executable, "marathon.py", "dev", "--port", str(port), "--ui-port", str(ui),
                                "--state-dir", str(state)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
        deadline = time.monotonic() + 120
        out = line = ""
        while "serving" not in line and dev.poll() is None:
            assert time.monotonic() < deadline, "marathon dev did not come up"
            line = dev.stdout.readline()
            out += line
        if "serving" in line:
            return dev, f"127.0.0.1:{port}"
        out += dev.stdout.read()
        assert "was taken" in out, out[-3000:]
    raise AssertionError("marathon dev found no free ports in 5 tries")


def _stop_dev(dev: subprocess.Popen) -> None:
    """`marathon dev` asked to stop (SIGINT to its process group), killed if it has not within 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(dev.pid, signal.SIGINT)
    try:
        dev.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(dev.pid, signal.SIGKILL)
        dev.wait()


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                kids = [int(c) for c in (task / "children").read_text().split()]
                found += kids
                todo += kids
    return found


def _kill_everything(dev: subprocess.Popen) -> None:
    """SIGKILL `marathon dev` and every process under it (the Temporal server runs in a session of its
    own, and would otherwise shut down gracefully on its parent's death, holding the port a while)."""
    victims = [dev.pid] + _descendants(dev.pid)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    dev.wait()
    for pid in victims[1:]:  # gone before the port is reused
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)


def _status(addr: str, workflow_id: str) -> dict | None:
    q = _temporal("workflow", "query", "--address", addr, "--workflow-id", workflow_id, "--name", "status", "-o", "json")
    if q.returncode != 0:
        return None
    doc = json.loads(q.stdout)
    return doc["queryResult"][0] if "queryResult" in doc else doc


def test_run_survives_a_restart_of_server_and_workers(tmp_path):
    """The whole `marathon dev` (server, workers, an evaluation in flight) killed with SIGKILL, then started
    again on the same state directory: the run goes on from its event history and `marathon follow`
    gets its report, with every tool call once. This is how a run outlives a lost machine whose state
    directory was kept."""
    dev, addr = _start_dev(tmp_path)
    try:
        started = subprocess.run([sys.executable, "marathon.py", "run", "--address", addr, "--problem", "mla_decode",
                                  "--device", "cpu", "--max-tool-calls", "5", "--detach", "--workflow-id", "restart-run"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0 and started.stdout.strip().endswith("restart-run"), started.stderr
        deadline = time.monotonic() + 300
        while True:  # kill once the first profile is done and a later tool call is under way
            assert time.monotonic() < deadline, "the run made no progress"
            st = _status(addr, "restart-run")
            if st and st["tool_calls"] >= 2:
                break
            time.sleep(1)
        _kill_everything(dev)  # as a lost machine would: server, workers, the evaluation in flight
        dev, addr = _start_dev(tmp_path)  # the run lives in the state directory, whatever the server's address
        followed = subprocess.run([sys.executable, "marathon.py", "follow", "--address", addr,
                                   "--workflow-id", "restart-run", "--json"],
                                  cwd=ROOT, capture_output=True, text=True, timeout=400)
        assert followed.returncode == 0, followed.stderr[-3000:]
        report = json.loads(followed.stdout)
        assert report["workflow_id"] == "restart-run" and report["tool_calls"] == 5 and report["attempts"] == 3
        assert report["best"]["verdict"]["status"] == "ok"
        configs = [json.dumps(a["config"], sort_keys=True) for a in report["ledger"]]
        assert len(set(configs)) == 3  # no configuration profiled twice, none lost
        missing = subprocess.run([sys.executable, "marathon.py", "follow", "--address", addr, "--workflow-id", "nope"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert missing.returncode == 2 and "no run 'nope'" in missing.stderr
    finally:
        _stop_dev(dev)
