"""The CLI: `marathon run` (embedded dev server and worker, a tuner run end to end on the CPU, the JSON
report), and the README's `temporal workflow start` against `marathon dev`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import worker
from marathon_support import ROOT

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
TEMPORAL = worker.temporal_binary()


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
    assert "profile attempt 0" in out.stderr  # live progress went to stderr


def _temporal(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([TEMPORAL, *args], capture_output=True, text=True, timeout=timeout)


def test_temporal_workflow_start_against_marathon_dev(tmp_path):
    port, ui = worker.free_port(), worker.free_port()
    addr = f"127.0.0.1:{port}"
    dev = subprocess.Popen([sys.executable, "marathon.py", "dev", "--port", str(port), "--ui-port", str(ui),
                            "--state-dir", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        line = ""
        while "serving" not in line:  # the worker says so once it polls
            assert time.monotonic() < deadline and dev.poll() is None, "marathon dev did not come up"
            line = dev.stdout.readline()
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
