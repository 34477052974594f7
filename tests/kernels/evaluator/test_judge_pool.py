"""Judges started ahead of need (kernels/evaluator/evaluate.py JudgePool): a spare judge serves one
evaluation with its candidate process already started, knows nothing of the request until it is
handed it, is discarded when the environment a judge would get has changed, and dies with its worker."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernels.evaluator.evaluate import JUDGES, EvalRequest, evaluate
from kernels.evaluator.judge import likely_device
from kernels.problems.spec import get_problem, resolve_kernel

ROOT = Path(__file__).resolve().parents[3]
MLA_TINY = [{"B": 1, "H": 2, "S": 16}]


def _request() -> EvalRequest:
    _, source = resolve_kernel(get_problem("mla_decode"), "starter")
    # the device a spare expects here (the CPU on a host without a GPU), so that it is the one used
    return EvalRequest(problem="mla_decode", source=source, device=likely_device(), mode="test", shapes=MLA_TINY,
                       seeds=1, probe_shapes=0, baselines=False, timeout_s=120)


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _wait_for(predicate, timeout: float = 60.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


def _spare():
    _wait_for(lambda: JUDGES._spares, what="a spare judge")
    return JUDGES._spares[0]


@pytest.fixture
def pool():
    JUDGES.keep_warm(1)
    yield JUDGES
    JUDGES.keep_warm(0)


def test_a_spare_judges_one_evaluation_and_knows_nothing_before(pool):
    spare = _spare()
    _wait_for(lambda: _children(spare.proc.pid), what="the spare's candidate process")
    # waiting: the request is nowhere it could read, and its command line names none
    assert not list(Path(spare.tmp.name).glob("request*"))
    assert Path(f"/proc/{spare.proc.pid}/cmdline").read_bytes().split(b"\0")[-2] == b"--await-request"
    first = evaluate(_request())
    assert first.status == "ok", first.reason
    assert first.sandbox["warm_judge"] and first.sandbox["prestarted"]
    assert spare.proc.poll() == 0  # one evaluation, then it exited
    assert not Path(spare.tmp.name).exists()
    second = evaluate(_request())  # the pool started the next spare when the first was taken
    assert second.status == "ok" and second.sandbox["warm_judge"]
    assert first.phases_s["judge_process"] >= 0 and "sandbox_start" in first.phases_s


def test_a_spare_started_with_another_environment_is_discarded(pool, monkeypatch):
    spare = _spare()
    monkeypatch.setenv("MARATHON_SANDBOX_MAX_PROCESSES", "15")  # a switch the judge reads
    verdict = evaluate(_request())
    assert verdict.status == "ok" and verdict.sandbox["warm_judge"] is False
    _wait_for(lambda: spare.proc.poll() is not None, 10, "the discarded spare to exit")


WORKER = """
import sys, time
from kernels.evaluator.evaluate import JUDGES
JUDGES.keep_warm(1)
while not JUDGES._spares:
    time.sleep(0.1)
print(JUDGES._spares[0].proc.pid, flush=True)
time.sleep(600)
"""


def test_a_spare_dies_with_its_worker():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    worker = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, env=env, text=True)
    try:
        judge = int(worker.stdout.readline())
        _wait_for(lambda: _children(judge), what="the spare's candidate process")
        candidate = _children(judge)[0]
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    gone = lambda pid: not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"  # noqa: E731
    _wait_for(lambda: gone(judge) and gone(candidate), 20, "the spare judge and its candidate process to die")


def test_a_candidate_process_started_for_another_device_is_killed_unused(tmp_path):
    from kernels.evaluator.judge import CandidateProcess, Judge
    wrong = CandidateProcess("cuda", tmp_path)
    verdict = Judge(_request().model_copy(update={"device": "cpu"})).run(wrong)
    assert verdict.status == "ok", verdict.reason
    assert "prestarted" not in verdict.sandbox
    assert wrong.proc.poll() is not None and not wrong.assigned
