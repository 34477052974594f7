"""Tasks through the one workflow, end to end on the CPU: each shipped example run with the tuner and with
a scripted model (`marathon run --task`), its best.patch measured again (`marathon eval --task --patch`),
a run that outlives a SIGKILL of `marathon dev` mid-measurement, and the input's checks."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from marathon_support import ROOT, load_test_module
from serving.scripted_model import FakeOpenAI, completion
from tasks import document
from tasks.spec import load_task
_cli = load_test_module("test_marathon_cli")
_kill_everything, _start_dev, _status, _stop_dev = _cli._kill_everything, _cli._start_dev, _cli._status, _cli._stop_dev

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="task commands are fenced with namespaces (root)")]
EXAMPLES = ROOT / "examples" / "tasks"
# each example, and the change that fixes it: (file, old, new)
FIXES = {
    "slow_suite": ("src/catalog.py", 'SEEN_AS = "list"', 'SEEN_AS = "set"'),
    "bundle_size": ("build.mjs", "minify: false", "minify: true"),
    "flaky_test": ("src/counter.py", "LOCKED = False", "LOCKED = True"),
}
NEEDS_NPM = {"bundle_size"}


def _examples() -> list:
    npm = pytest.mark.skipif(shutil.which("npm") is None, reason="needs node and npm")
    return [pytest.param(name, marks=[npm] if name in NEEDS_NPM else []) for name in FIXES]


def _marathon(*args: str, env: dict | None = None, timeout: int = 540) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "marathon.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _remeasured(task: str, report_dir: Path) -> dict:
    out = _marathon("eval", "--task", str(EXAMPLES / task), "--patch", str(report_dir / "best.patch"), "--json",
                    timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _check_run(task: str, out: subprocess.CompletedProcess, state: Path) -> dict:
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    best = report["best"]
    assert best is not None and best["verdict"]["status"] == "ok", report.get("stop_reason")
    metric = best["verdict"]["metric"]
    assert best["speedup"] > 1.0 and metric["gain"] > 1.0  # beats the task's own files on its figure
    folder = Path(report["report"]).parent
    patch = (folder / "best.patch").read_text()
    path, old, new = FIXES[task]
    assert f"+++ b/{path}" in patch and any(line.startswith("+") and new in line for line in patch.splitlines())
    again = _remeasured(task, folder)  # applied to a clean copy, it measures the same within noise
    assert again["status"] == "ok" and again["metric"]["gain"] > 1.0
    if metric["name"].startswith("METRIC"):
        assert again["metric"]["value"] == metric["value"]  # a size: exactly the same
    if metric["name"] == "failure_rate":
        assert again["metric"]["value"] == 0.0
    assert "<!doctype html>" in Path(report["report"]).read_text().lower()
    return report


@pytest.mark.parametrize("task", _examples())
def test_a_task_run_with_the_tuner_beats_the_tasks_own_files(tmp_path, task):
    out = _marathon("run", "--task", str(EXAMPLES / task), "--max-tool-calls", "8", "--json",
                    "--state-dir", str(tmp_path))
    report = _check_run(task, out, tmp_path)
    assert report["policy"] == "tuner" and report["tool_calls"] <= 8


@pytest.mark.parametrize("task", _examples())
def test_a_task_run_with_a_scripted_model_beats_the_tasks_own_files(tmp_path, task):
    bundle = load_task(EXAMPLES / task)
    path, old, new = FIXES[task]
    fixed = document.join({path: bundle.files[path].replace(old, new)})

    def script(turn, delivery, request):
        if turn < 0:
            return completion("no summary")
        if turn == 1:
            tools = {t["function"]["name"] for t in request.get("tools", [])}
            assert {"write_files", "check_guard", "measure"} <= tools, tools  # a task's tools, not a kernel's
            return completion("the fix", [("write_files", {"source": fixed}), ("check_guard", {}), ("measure", {})],
                              turn=turn)
        return completion("done", [("list_attempts", {})], turn=turn)

    with FakeOpenAI(script) as fake:
        out = _marathon("run", "--task", str(EXAMPLES / task), "--max-tool-calls", "6", "--json",
                        "--state-dir", str(tmp_path), "--model", "fake-model", "--base-url", fake.base_url,
                        "--api-key-env", "MARATHON_TEST_KEY", env={"MARATHON_TEST_KEY": "sk-scripted"})
    report = _check_run(task, out, tmp_path)
    assert report["policy"] == "llm" and report["best"]["attempt"] == 1
    system = next(m["content"] for m in fake.seen[0].request["messages"] if m["role"] == "system")
    assert f"Task: {task}" in system and "### file: " in system and "GPU kernel" not in system


def test_a_task_run_survives_a_sigkill_of_marathon_dev_mid_measurement(tmp_path):
    dev, addr = _start_dev(tmp_path)
    try:
        started = _marathon("run", "--address", addr, "--task", str(EXAMPLES / "slow_suite"), "--max-tool-calls", "5",
                            "--detach", "--workflow-id", "task-restart", timeout=120)
        assert started.returncode == 0, started.stderr
        deadline = time.monotonic() + 300
        while True:  # the tuner's configuration written: its measurement is under way
            assert time.monotonic() < deadline, "the run made no progress"
            st = _status(addr, "task-restart")
            if st and st["tool_calls"] >= 2:
                break
            time.sleep(0.5)
        _kill_everything(dev)
        dev, addr = _start_dev(tmp_path)  # the run lives in the state directory, whatever the server's address
        followed = _marathon("follow", "--address", addr, "--workflow-id", "task-restart", "--json", timeout=400)
        assert followed.returncode == 0, followed.stderr[-3000:]
        report = json.loads(followed.stdout)
        # the start's measurement, the set configuration written and measured: each once, none lost
        assert report["tool_calls"] == 3 and report["attempts"] == 2, report["stop_reason"]
        assert [a["n"] for a in report["ledger"]] == [0, 1]
        assert [len([e for e in a["evals"] if e["mode"] == "full"]) for a in report["ledger"]] == [1, 1]
        assert report["best"]["attempt"] == 1 and report["best"]["verdict"]["metric"]["gain"] > 1.0
    finally:
        _stop_dev(dev)


def test_a_task_input_is_checked_at_the_door(tmp_path):
    from pydantic import ValidationError

    from workflows.models import RunSpec
    bundle = load_task(EXAMPLES / "slow_suite")
    with pytest.raises(ValidationError, match="a task's run names its task"):
        RunSpec(problem="mla_decode", task=bundle)
    with pytest.raises(ValidationError, match="relative path"):
        RunSpec.model_validate({"problem": "x", "task": {"spec": bundle.spec.model_dump(),
                                                         "files": {"/etc/passwd": ""}}})
    out = _marathon("run", "--task", str(tmp_path), "--max-tool-calls", "3", timeout=60)
    assert out.returncode == 2 and "no task.toml" in out.stderr and "Traceback" not in out.stderr
