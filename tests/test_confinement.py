"""The evaluator's processes keep the worker's secrets and die with it (kernels/evaluator/confinement.py), and
a GPU judge does not time beside another process (kernels/evaluator/gpu_quiet.py).

The end-to-end cases start a stand-in worker process (what worker.py does that matters here: it
makes itself non-dumpable, holds a fake API key in its environment, and calls evaluate()), so the
judge and the candidate are started exactly as in production."""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernels.evaluator import confinement, gpu_quiet, isolation
from kernels.evaluator.evaluate import EvalRequest
from kernels.evaluator.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "hostile"
MLA = [{"B": 1, "H": 2, "S": 40}]

WORKER = """
import os, sys
from kernels.evaluator import isolation
from kernels.evaluator.confinement import make_non_dumpable
from kernels.evaluator.evaluate import EvalRequest, evaluate
if sys.argv[3] == "unprivileged":  # as a worker started by an ordinary user: no capabilities
    assert isolation.drop_capabilities()
make_non_dumpable()
req = EvalRequest.model_validate_json(open(sys.argv[1]).read())
verdict = evaluate(req)
open(sys.argv[2], "w").write(verdict.model_dump_json())
"""


def start_worker(tmp: Path, source: str, env: dict[str, str], timeout_s: float,
                 privileges: str = "as-is") -> tuple[subprocess.Popen, Path]:
    req = EvalRequest(problem="mla_decode", source=source, kernel="confinement-test", device="cpu", mode="test",
                      shapes=MLA, seeds=1, probe_shapes=0, timeout_s=timeout_s, baselines=False)
    (tmp / "request.json").write_text(req.model_dump_json())
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(tmp / "request.json"), str(tmp / "verdict.json"),
                             privileges],
                            cwd=tmp / "cwd", env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return proc, tmp / "verdict.json"


def worker_dirs(tmp: Path) -> dict[str, Path]:
    dirs = {name: tmp / name for name in ("cwd", "home", "tmp")}
    for d in dirs.values():
        d.mkdir()
    state = dirs["cwd"] / "state"  # where a worker keeps artifacts
    state.mkdir()
    (state / "artifact.json").write_text('{"verdict": "ok"}')
    return dirs


# --- the environment ---------------------------------------------------------------------------------
def test_judge_env_is_an_allowlist():
    worker = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "HOME": "/home/w", "CUDA_VISIBLE_DEVICES": "3",
              "TRITON_INTERPRET": "1", "MARATHON_SANDBOX_SECCOMP": "0", "PYTHONPATH": "/extra",
              "OPENAI_API_KEY": "sk-1", "MARATHON_TEST_SECRET": "sk-2", "TRITON_AUTH_TOKEN": "sk-3",
              "AWS_SECRET_ACCESS_KEY": "sk-4", "SSH_AUTH_SOCK": "/tmp/agent", "TEMPORAL_ADDRESS": "x:1",
              "LD_PRELOAD": "/evil.so", "PYTHONSTARTUP": "/evil.py"}
    env = confinement.judge_env("/scratch/j", "/repo", worker)
    assert not any(v.startswith("sk-") for v in env.values()), env
    for name in ("SSH_AUTH_SOCK", "TEMPORAL_ADDRESS", "LD_PRELOAD", "PYTHONSTARTUP"):
        assert name not in env
    assert env["HOME"] == "/scratch/j" and env["PYTHONPATH"] == "/repo" + os.pathsep + "/extra"
    assert env["TRITON_CACHE_DIR"] == "/home/w/.triton/cache"  # the worker's cache, kept across judges
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["MARATHON_SANDBOX_SECCOMP"] == "0"
    assert env["PATH"] == "/usr/bin" and env["TRITON_INTERPRET"] == "1"


@pytest.mark.parametrize("dumpable", [False, True], ids=["non-dumpable", "dumpable-control"])
def test_non_dumpable_hides_environ_from_a_process_without_ptrace_rights(dumpable):
    """A parent without capabilities (as an ordinary user's process) holding a key starts a child,
    which also has none, as the sandbox; the child reads the parent's environ. Non-dumpable: refused;
    the dumpable control shows the read works otherwise."""
    code = ("import os, sys\nfrom kernels.evaluator import confinement, isolation\n"
            "if os.geteuid() == 0:\n"
            "    assert isolation.drop_capabilities()\n"
            "if sys.argv[1] == 'parent':\n"
            "    if sys.argv[3] == '0':\n"
            "        assert confinement.make_non_dumpable()\n"
            "    import subprocess\n"
            "    sys.exit(subprocess.run([sys.executable, '-c', sys.argv[2], 'child', str(os.getpid())]).returncode)\n"
            "try:\n"
            "    data = open(f'/proc/{sys.argv[2]}/environ', 'rb').read()\n"
            "except PermissionError:\n"
            "    sys.exit(10)\n"
            "sys.exit(11 if b'sk-marathon' in data else 12)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MARATHON_TEST_SECRET": "sk-marathon-" + secrets.token_hex(8)}
    out = subprocess.run([sys.executable, "-c", code, "parent", code, str(int(dumpable))], env=env, timeout=60,
                         capture_output=True, text=True)
    assert out.returncode == (11 if dumpable else 10), out.stdout + out.stderr


DECOY = "import os, sys\nfrom kernels.evaluator import isolation\nisolation.drop_capabilities()\nos.execvp('sleep', ['sleep', '300'])\n"


@pytest.mark.parametrize("setting", ["all-fences", "landlock-off-unprivileged-worker"])
def test_a_candidate_past_the_policy_finds_no_key_anywhere(tmp_path, setting):
    """The static policy off, the candidate reads every /proc/*/environ and cmdline it can, the memory
    of the judge and the worker, and every file under the worker's folders, HOME and the temp dir.
    The worker's key is nowhere in what it found, nor in the verdict. Landlock alone already shuts
    /proc of processes outside the sandbox (its ptrace rule), so the second setting switches it off and
    runs the worker without capabilities, as an ordinary user's: then only the allowlisted environment
    and non-dumpability keep the key, and a decoy process outside the worker's tree (no capabilities,
    dumpable), holding a key of the same shape, shows that the search does find what is readable."""
    dirs = worker_dirs(tmp_path)
    key = "sk-marathon-worker-" + secrets.token_hex(12)
    decoy_key = "sk-marathon-decoy-" + secrets.token_hex(12)
    decoy = subprocess.Popen([sys.executable, "-c", DECOY], env={"PATH": os.environ.get("PATH", ""),
                                                                 "PYTHONPATH": str(ROOT), "DECOY_TOKEN": decoy_key})
    relaxed = setting != "all-fences"
    extra = {"MARATHON_SANDBOX_LANDLOCK": "0"} if relaxed else {}
    roots = os.pathsep.join(str(d) for d in [dirs["cwd"], dirs["cwd"] / "state", dirs["home"], dirs["tmp"]])
    source = (HOSTILE / "mla_snoop_everything.py").read_text().replace("@ROOTS@", roots)
    try:
        proc, out = start_worker(tmp_path, source, {
            "MARATHON_TEST_SECRET": key, "OPENAI_API_KEY": key, "MARATHON_UNSAFE_SKIP_POLICY": "1",
            "MARATHON_SANDBOX_SEAL": "0",  # the fences alone: the seal would end the search at its first step
            "HOME": str(dirs["home"]), "TMPDIR": str(dirs["tmp"]), **extra}, timeout_s=120,
            privileges="unprivileged" if relaxed else "as-is")
        log, _ = proc.communicate(timeout=400)
    finally:
        decoy.kill()
        decoy.wait()
    assert proc.returncode == 0 and out.exists(), log[-3000:]
    verdict = Verdict.model_validate_json(out.read_text())
    text = verdict.model_dump_json()
    assert verdict.status == "crashed" and "keys found" in verdict.reason, text[-3000:]
    if relaxed:
        # the search works: the decoy's key, read from its environ
        assert f"'{decoy_key}': '/proc/{decoy.pid}/environ'" in verdict.reason, verdict.reason[-2000:]
    assert key not in text and key.encode() not in log
    assert "'environ': 0" not in verdict.reason and "'files': 0" not in verdict.reason, verdict.reason[-500:]
    print(f"\n{setting}: {verdict.reason.splitlines()[-1]}")
    assert any("static policy was skipped" in f for f in verdict.flags)
    if os.geteuid() == 0:
        assert verdict.sandbox.get("capabilities_dropped") is True, verdict.sandbox
    assert verdict.sandbox.get("non_dumpable") is True, verdict.sandbox


# --- orphans and scratch -------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    return [p for p, parent in isolation._parents().items() if parent == pid]


def _alive(pid: int) -> bool:
    return pid in isolation._parents()  # zombies count as gone


def test_judge_and_candidate_die_with_their_worker_and_leave_scratch_to_the_next(tmp_path):
    dirs = worker_dirs(tmp_path)
    source = (HOSTILE / "mla_endless_python_loop.py").read_text()
    proc, _ = start_worker(tmp_path, source, {"TMPDIR": str(dirs["tmp"])}, timeout_s=300)
    judge = candidate = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and candidate is None:
            judges = _children(proc.pid)
            judge = judges[0] if judges else None
            candidates = _children(judge) if judge else []
            candidate = candidates[0] if candidates else None
            time.sleep(0.2)
        assert judge and candidate, f"no judge/candidate under the worker: {proc.poll()}"
        time.sleep(1.0)  # the candidate's scratch folder is made before it starts; let it settle
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10 and (_alive(judge) or _alive(candidate)):
            time.sleep(0.1)
        gone_after = time.monotonic() - t0
        assert not _alive(judge) and not _alive(candidate), "an orphan outlived its worker by 10 s"
        print(f"judge and candidate gone {gone_after:.2f} s after the worker's SIGKILL")
    finally:
        for pid in filter(None, (judge, candidate)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
    left = sorted(p.name for p in dirs["tmp"].iterdir())
    assert any(n.startswith(f"marathon-judge-{proc.pid}-") for n in left), left
    assert any(n.startswith(f"marathon-eval-{judge}-") for n in left), left
    live = dirs["tmp"] / f"marathon-eval-{os.getpid()}-live"  # a running judge's folder: kept
    live.mkdir()
    other = dirs["tmp"] / "marathon-notes"  # not named like ours: kept
    other.mkdir()
    removed = confinement.remove_stale_scratch(dirs["tmp"])
    assert sorted(p.name for p in removed) == [n for n in left if n.startswith(("marathon-eval-", "marathon-judge-"))]
    kept = {p.name for p in dirs["tmp"].iterdir()}
    assert {live.name, other.name} <= kept and not kept & {p.name for p in removed}, kept


def test_stale_scratch_removal_spares_live_owners_and_strangers(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (f"marathon-eval-{dead.pid}-abc", f"marathon-judge-{dead.pid}-x", f"marathon-eval-{os.getpid()}-y",
                 "marathon-eval-abc", "marathon-eval-12x-1", "other-123-x"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "candidate.py").write_text("x")
    (tmp_path / f"marathon-ncu-{dead.pid}-file").write_text("a file, not a folder")
    removed = confinement.remove_stale_scratch(tmp_path)
    assert sorted(p.name for p in removed) == sorted([f"marathon-eval-{dead.pid}-abc", f"marathon-judge-{dead.pid}-x"])
    assert (tmp_path / f"marathon-eval-{os.getpid()}-y").exists() and (tmp_path / "marathon-eval-abc").exists()
    assert (tmp_path / f"marathon-ncu-{dead.pid}-file").exists()


# --- a GPU shared with another process -------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def _wait(answers, ours=frozenset({10, 11}), bound=30.0):
    clock, calls = FakeClock(), []

    def query():
        calls.append(clock.now)
        return answers(clock.now)
    note = gpu_quiet.wait_for_quiet_gpu(query, lambda: set(ours), bound_s=bound, poll_s=2.0, clock=clock,
                                        sleep=clock.sleep)
    return note, clock.now, calls


def test_quiet_gpu_times_at_once():
    note, waited, calls = _wait(lambda t: {10, 11})  # only the judge and its sandbox
    assert note == "" and waited == 0 and len(calls) == 1


def test_gpu_query_unavailable_does_not_block():
    note, waited, _ = _wait(lambda t: None)
    assert note == "" and waited == 0


def test_waits_for_another_process_to_leave_and_says_so():
    note, waited, _ = _wait(lambda t: {10, 4242} if t < 7 else {10})
    assert waited == 8.0 and "waited 8 s" in note and "4242" in note and "beside" not in note


def test_times_anyway_after_the_bound_and_says_so():
    note, waited, calls = _wait(lambda t: {10, 11, 4242, 4343}, bound=30.0)
    assert waited == 30.0 and "timed beside them" in note and "4242, 4343" in note
    assert len(calls) == 16  # every 2 s, and once at the bound


def test_pids_of_another_namespace_are_counted_not_named():
    # the driver lists host pids: ours (10, 11) appear as 7010, 7011; a third process is another's
    note, waited, _ = _wait(lambda t: {7010, 7011, 7999}, bound=4.0)
    assert waited == 4.0 and "1 unnamed: another pid namespace" in note and "timed beside them" in note
    note, waited, _ = _wait(lambda t: {7010, 7011}, bound=4.0)  # just our two: quiet
    assert note == "" and waited == 0


def test_nvidia_smi_query_filters_by_gpu(monkeypatch, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf 'GPU-aaa, 100\\nGPU-bbb, 200\\nGPU-aaa, 300\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert gpu_quiet.nvidia_smi_query("GPU-aaa")() == {100, 300}
    assert gpu_quiet.nvidia_smi_query(None)() == {100, 200, 300}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu_quiet.nvidia_smi_query("GPU-aaa")() is None


def test_a_starting_gpu_worker_removes_stale_scratch_and_makes_itself_non_dumpable(monkeypatch, tmp_path):
    import tempfile

    import worker
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"marathon-eval-{dead.pid}-left"
    stale.mkdir()
    calls = []
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(worker, "make_non_dumpable", lambda: calls.append("non-dumpable") or True)

    async def serve(*args) -> None:  # the Temporal worker itself is not this test's concern
        calls.append("serve")
    monkeypatch.setattr(worker, "_serve", serve)
    assert worker.main(["--queues", worker.names.GPU_TASK_QUEUE, "--gpus", "none"]) == 0
    assert calls == ["non-dumpable", "serve"] and not stale.exists()
