"""The evaluator's processes keep the worker's secrets and die with it (kernels/evaluator/confinement.py), and
a GPU judge does not time beside another process (kernels/evaluator/gpu_quiet.py).

The end-to-end cases start a stand-in worker process (what worker.py does that matters here: it
makes itself non-dumpable, holds a fake API key in its environment, and calls evaluate()), so the
judge and the candidate are started exactly as in production."""
from __future__ import annotations

import os
import secrets
import signal
import tempfile
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernels.evaluator import confinement, gpu_quiet, isolation
from kernels.evaluator.evaluate import EvalRequest
from kernels.evaluator.verdict import Verdict
from kernels.evaluator.fence_drills import (DENIED, FENCES, Listeners, escape_values, files_holding, hostile_source, report_of,
                           running_with)

ROOT = Path(__file__).resolve().parents[3]
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
    /proc of processes outside the sandbox (its read allowlist and its ptrace rule: /proc is not even
    listable, and nothing of the worker's folders is readable), so the second setting switches it off and
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
        assert "'environ': 0" not in verdict.reason and "'files': 0" not in verdict.reason, verdict.reason[-500:]
    else:  # reads fenced: no other process's /proc, none of the worker's folders
        assert "'proc': 'unlistable'" in verdict.reason and "'files': 0" in verdict.reason, verdict.reason[-500:]
        assert verdict.sandbox.get("landlock_reads") is True, verdict.sandbox
    assert key not in text and key.encode() not in log
    print(f"\n{setting}: {verdict.reason.splitlines()[-1]}")
    assert any("static policy was skipped" in f for f in verdict.flags)
    if os.geteuid() == 0:
        assert verdict.sandbox.get("capabilities_dropped") is True, verdict.sandbox
    assert verdict.sandbox.get("non_dumpable") is True, verdict.sandbox


# --- orphans and scratch -------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    return [p for p, parent in isolation.parent_pids().items() if parent == pid]


def _alive(pid: int) -> bool:
    return pid in isolation.parent_pids()  # zombies count as gone


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


# --- a hostile problem file and a hostile candidate, with a canary key in the worker's environment ------
@pytest.fixture
def escape_setup(tmp_path, monkeypatch):
    """The canary key in the environment of the test (a dumpable process: a target) and of the
    worker, a canary file under /tmp, a file in the project, listeners, a marker for process searches."""
    canary = "sk-marathon-canary-" + secrets.token_hex(12)
    monkeypatch.setenv("MARATHON_TEST_SECRET", canary)
    fd, canary_file = tempfile.mkstemp(prefix="marathon-canary-", suffix=".txt", dir="/tmp")
    os.write(fd, canary.encode())
    os.close(fd)
    project_file = ROOT / f"_sentinel_{secrets.token_hex(4)}.txt"  # the project, outside the readable kernels/
    project_file.write_text("original\n")
    listeners = Listeners(reply=canary.encode())  # a host service's socket answers with the canary
    values = escape_values(listeners, canary_file, project_file)
    try:
        yield {"canary": canary, "values": values, "listeners": listeners, "dirs": worker_dirs(tmp_path),
               "tmp": tmp_path}
    finally:
        listeners.close()
        os.unlink(canary_file)
        project_file.unlink(missing_ok=True)
        Path(values["LEAK_PATH"]).unlink(missing_ok=True)
        for pid in running_with(values["MARKER"]):
            os.kill(pid, signal.SIGKILL)


def run_worker_on(tmp: Path, req: EvalRequest, env: dict[str, str]) -> tuple[Verdict, str]:
    (tmp / "request.json").write_text(req.model_dump_json())
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", WORKER, str(tmp / "request.json"), str(tmp / "verdict.json"), "as-is"],
                          cwd=tmp / "cwd", env=full, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0 and (tmp / "verdict.json").exists(), log[-3000:]
    return Verdict.model_validate_json((tmp / "verdict.json").read_text()), log


def check_nothing_escaped(setup: dict, verdict: Verdict, log: str, report: dict, survivors: bool = False) -> None:
    text = verdict.model_dump_json()
    canary, values = setup["canary"], setup["values"]
    environ = report["environ"]
    assert set(environ) == {"listing", "others_readable"} and environ["others_readable"] == 0, environ
    for name in DENIED:
        assert report[name].startswith("denied"), (name, report[name])
    assert canary not in text and canary not in log
    assert not setup["listeners"].accepted, "the hostile code reached a listener on the host"
    assert not Path(values["LEAK_PATH"]).exists()
    assert Path(values["PROJECT_FILE"]).read_text() == "original\n"
    deadline = time.monotonic() + 10
    while running_with(values["MARKER"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = running_with(values["MARKER"])
    if survivors:  # the control without a PID namespace or a subreaper: the orphan is still there (the fixture ends it)
        assert left, "the control's orphan did not outlive the evaluation: the test proves nothing"
    else:
        assert not left, "a process the hostile code started outlived the evaluation"
    assert not files_holding([setup["tmp"], FENCES], canary.encode())


@pytest.mark.parametrize("setting", ["all-fences", "no-pid-namespace", "no-pid-namespace-nor-subreaper-control"])
def test_a_hostile_problem_file_reaches_nothing(escape_setup, setting):
    """The problem file's own code, past nothing but the fences (a problem file has no static
    policy): it finds no key, reads and writes nothing outside its scratch, reaches no listener, starts
    no shell, and the compiler it may start, orphaned outside the sandbox's process tree, ends with
    the evaluation: its PID namespace holds it, and where none can be made (as on a GPU host whose
    driver refuses one) the judge adopts the orphan as its subreaper and ends it; the control with
    neither shows the orphan would outlive the evaluation.
    Its error reaches the verdict with the worker's environment values scrubbed (the value written
    into the file stands there by its variable's name), and the verdict says the problem file, not
    the candidate, failed."""
    setup = escape_setup
    values = setup["values"]
    control = setting.endswith("control")
    no_pidns = setting != "all-fences"
    source = hostile_source("problem_escape", values)
    probe = (ROOT / "kernels" / "evaluator" / "fence_probe" / "candidate.py").read_text()
    req = EvalRequest(problem="escape", problem_source=source, source=probe, kernel="confinement-test", device="cpu",
                      mode="test", shapes=[{"n": 8}], seeds=1, probe_shapes=0, timeout_s=120, baselines=False)
    verdict, log = run_worker_on(setup["tmp"], req, {
        "MARATHON_TEST_SECRET": setup["canary"], "OPENAI_API_KEY": setup["canary"],
        "MARATHON_TEST_ECHO": values["ECHO"], "HOME": str(setup["dirs"]["home"]), "TMPDIR": str(setup["dirs"]["tmp"]),
        **({"MARATHON_SANDBOX_PIDNS": "0"} if no_pidns else {}),
        **({"MARATHON_SANDBOX_SUBREAPER": "0"} if control else {})})
    assert verdict.status == "crashed" and "the problem file raised" in verdict.reason, verdict.reason[-3000:]
    assert "the candidate was not judged" in verdict.reason
    report = report_of(verdict.reason)
    print("\n" + "\n".join(f"{k}: {v}" for k, v in report.items()))
    check_nothing_escaped(setup, verdict, log, report, survivors=control)
    assert report["detached compiler"].startswith("GOT") and "was running: True" in report["detached compiler"], report
    assert values["ECHO"] not in verdict.model_dump_json() and "[$MARATHON_TEST_ECHO]" in verdict.reason
    sandbox = verdict.sandbox
    for fence in ("netns", "landlock", "landlock_reads", "landlock_exec", "seccomp", "unix_socket_denied",
                  "capabilities_dropped", "non_dumpable") + (() if no_pidns else ("pid_namespace", "own_proc", "private_dev_shm")):
        assert sandbox.get(f"problem_{fence}"), (fence, sandbox)
    if no_pidns:
        assert "pid_namespace (problem file)" in sandbox["missing"], sandbox
    assert sandbox["judge_subreaper"] is (not control), sandbox
    assert sandbox["problem_processes"].startswith("torch-compile toolchain only"), sandbox
    assert sandbox["judge_capabilities"] in ("SYS_ADMIN, SETPCAP", "SETPCAP, SYS_ADMIN", "none"), sandbox


def test_a_candidate_past_the_policy_reads_and_starts_nothing(escape_setup):
    """With the static policy and the seal off (the OS fences alone): on the CPU no process starts at all (seccomp: no fork, vfork or
    exec), so neither a shell (subprocess, posix_spawn, torch.utils.collect_env) nor a detached child
    nor the compiler; reads outside the allowlist fail; nothing is left running."""
    setup = escape_setup
    source = hostile_source("candidate_escape", setup["values"])
    req = EvalRequest(problem="mla_decode", source=source, kernel="confinement-test", device="cpu", mode="test",
                      shapes=MLA, seeds=1, probe_shapes=0, timeout_s=120, baselines=False)
    verdict, log = run_worker_on(setup["tmp"], req, {
        "MARATHON_TEST_SECRET": setup["canary"], "OPENAI_API_KEY": setup["canary"], "MARATHON_UNSAFE_SKIP_POLICY": "1",
        "MARATHON_SANDBOX_SEAL": "0",  # the OS fences alone (the seal would end the process at its first import)
        "HOME": str(setup["dirs"]["home"]), "TMPDIR": str(setup["dirs"]["tmp"])})
    assert verdict.status == "crashed" and "hostile candidate report" in verdict.reason, verdict.reason[-3000:]
    report = report_of(verdict.reason)
    print("\n" + "\n".join(f"{k}: {v}" for k, v in report.items()))
    check_nothing_escaped(setup, verdict, log, report)
    for name in ("detached compiler", "collect_env shell"):
        assert report[name].startswith("denied"), (name, report[name])
    assert verdict.sandbox.get("processes") == "none" and verdict.sandbox.get("pid_namespace"), verdict.sandbox
    assert verdict.sandbox.get("unix_socket_denied") is True, verdict.sandbox
    assert verdict.sandbox.get("own_proc") and verdict.sandbox.get("private_dev_shm"), verdict.sandbox


TOOLCHAIN_PROBE = """
import os, subprocess, sys, sysconfig
from pathlib import Path
import triton
from kernels.evaluator import fences
scratch = sys.argv[1]
facts = fences.put_up("cpu", writable=[scratch], readable=[], toolchain="triton", netns=True, landlock=True,
                      landlock_reads=True, landlock_exec=True, seccomp=True, drop_capabilities=True)
assert facts["landlock_exec"] and facts["seccomp"], facts
nvidia = Path(triton.__file__).parent / "backends" / "nvidia"
ptx = Path(scratch) / "k.ptx"
ptx.write_text(".version 8.0\\n.target sm_90\\n.address_size 64\\n.visible .entry k()\\n{\\nret;\\n}\\n")
subprocess.run([str(nvidia / "bin" / "ptxas"), "--gpu-name=sm_90", str(ptx), "-o", str(ptx) + ".o"], check=True)
# Triton's own launcher source, compiled as Triton builds it (linking needs libcuda: a GPU host's)
subprocess.run(["gcc", str(nvidia / "driver.c"), "-O3", "-fPIC", "-c", "-o", str(Path(scratch) / "driver.o"),
                f"-I{nvidia / 'include'}", f"-I{sysconfig.get_paths()['include']}"], check=True)
for argv in (["/bin/sh", "-c", "true"], [sys.executable, "-c", "pass"], ["ls"]):
    try:
        subprocess.run(argv, check=True)
        print("STARTED", argv[0])
    except OSError as exc:
        print("refused", argv[0], exc.errno)
print("toolchain ok")
"""


def test_the_gpu_toolchain_runs_inside_the_fences_and_nothing_else_starts(tmp_path):
    """On CUDA Triton runs ptxas and the C compiler inside the candidate's fences: both work under the
    Landlock program allowlist (ptxas needs no GPU, and the compiler builds Triton's own launcher
    source), while a shell, Python and any other program are refused."""
    if isolation.landlock_abi() < 1:
        pytest.skip("no Landlock here")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", TOOLCHAIN_PROBE, str(tmp_path)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "toolchain ok" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
    assert "STARTED" not in out.stdout and out.stdout.count("refused") == 3, out.stdout
    assert (tmp_path / "k.ptx.o").exists() and (tmp_path / "driver.o").exists()


def test_an_honest_problem_file_is_ok_inside_the_fences(escape_setup):
    """The control: the evaluator's own small problem and kernel, started by the same stand-in worker
    with the canary key, judged ok with every fence of both sandboxes up."""
    setup = escape_setup
    folder = ROOT / "kernels" / "evaluator" / "fence_probe"
    req = EvalRequest(problem="fence_probe", problem_source=(folder / "problem.py").read_text(),
                      source=(folder / "candidate.py").read_text(), kernel="confinement-test", device="cpu",
                      mode="test", shapes=[{"n": 1000}], seeds=2, probe_shapes=0, timeout_s=120, baselines=False)
    verdict, log = run_worker_on(setup["tmp"], req, {
        "MARATHON_TEST_SECRET": setup["canary"], "OPENAI_API_KEY": setup["canary"],
        "HOME": str(setup["dirs"]["home"]), "TMPDIR": str(setup["dirs"]["tmp"])})
    assert verdict.status == "ok", verdict.reason[-3000:] + verdict.log_tail[-2000:]
    assert "missing" not in verdict.sandbox, verdict.sandbox
    assert verdict.sandbox["unix_socket_denied"] and verdict.sandbox["problem_unix_socket_denied"], verdict.sandbox
    assert setup["canary"] not in verdict.model_dump_json() + log


def test_scrub_takes_out_values_not_only_names():
    env = {"OPENAI_API_KEY": "sk-abc123", "SHORT_SECRET": "pw12", "MY_VAR": "a-long-private-value",
           "HOME": "/home/someone", "LANG": "C.UTF-8", "N": "12345678", "PATH": "/usr/bin:/bin"}
    text = {"reason": "key sk-abc123 / pw12 / a-long-private-value at /home/someone/x C.UTF-8 12345678",
            "flags": ["sk-abc123"], "shapes": [{"note": "a-long-private-value"}], "n": 3}
    out = confinement.scrub(text, env)
    assert out["reason"] == ("key [$OPENAI_API_KEY] / [$SHORT_SECRET] / [$MY_VAR] at /home/someone/x C.UTF-8 "
                             "12345678"), out
    assert out["flags"] == ["[$OPENAI_API_KEY]"] and out["shapes"][0]["note"] == "[$MY_VAR]" and out["n"] == 3


def test_a_sandbox_finds_packages_installed_outside_site_packages(tmp_path, monkeypatch):
    """An offline bundle installed into a folder of its own (on PYTHONPATH, no site-packages in its name)
    holds what the sandbox imports (pydantic for the protocol): that folder is on the sandbox's path,
    and no other entry of the judge's path that is not a site-packages folder."""
    from kernels.evaluator.confinement import import_roots, sandbox_env
    bundle, other = tmp_path / "bundle", tmp_path / "elsewhere"
    (bundle / "bundled_pkg").mkdir(parents=True)
    (bundle / "bundled_pkg" / "__init__.py").write_text("")
    other.mkdir()
    monkeypatch.syspath_prepend(str(other))
    monkeypatch.syspath_prepend(str(bundle))
    assert str(bundle) in import_roots(("bundled_pkg",)) and str(other) not in import_roots(("bundled_pkg",))
    path = sandbox_env("cpu", tmp_path, "t", ROOT, str(tmp_path / "cache"))["PYTHONPATH"].split(os.pathsep)
    assert str(other) not in path and str(bundle) not in path  # not one of the sandbox's packages
    import pydantic
    assert str(Path(pydantic.__file__).parent.parent) in path


def test_a_cuda_sandbox_sees_one_gpu_the_judges(tmp_path):
    """The clock synchronises the judge's GPU only: a candidate that saw another could run its work there,
    unwaited for (and take a GPU another worker times on). A CUDA sandbox sees exactly the judge's GPU."""
    from kernels.evaluator.confinement import sandbox_env

    def visible(source: dict[str, str], device: str = "cuda") -> str | None:
        return sandbox_env(device, tmp_path, "t", ROOT, str(tmp_path / "cache"), source=source).get("CUDA_VISIBLE_DEVICES")

    assert visible({}) == "0"  # the judge sees every GPU and uses the first
    assert visible({"CUDA_VISIBLE_DEVICES": "3,5"}) == "3"
    assert visible({"CUDA_VISIBLE_DEVICES": "GPU-1f2e, GPU-77aa"}) == "GPU-1f2e"
    assert visible({"CUDA_VISIBLE_DEVICES": ""}) == ""  # none stays none
    assert visible({"CUDA_VISIBLE_DEVICES": "3,5"}, device="cpu") == "3,5"  # the interpreter uses no GPU


SOCKET_PROBE = """
import errno, socket, sys
from kernels.evaluator import isolation
assert isolation.install_seccomp(allow_exec=False)
def outcome(fn):
    try:
        fn()
        return "allowed"
    except OSError as exc:
        return errno.errorcode[exc.errno]
print(outcome(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
      outcome(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)),
      outcome(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
      outcome(lambda: socket.socketpair()),
      outcome(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)),
      outcome(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)),
      outcome(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW)),
      isolation.unix_socket_refused())
import getpass
print(getpass.getuser() != "")  # the nscd lookup behind getpwuid falls back on EPERM
"""


def test_seccomp_refuses_unix_sockets_but_keeps_stream_pairs():
    """A Unix socket of a path reaches the host's services (docker.sock, D-Bus) through the file system,
    which neither the network namespace nor Landlock holds: seccomp refuses socket() for AF_UNIX (EPERM)
    and every other family (EACCES), and socketpair() for datagrams (sendto() names any path), while
    stream and seqpacket pairs (no address, nothing outside) still work, and so does the user's name."""
    out = subprocess.run([sys.executable, "-c", SOCKET_PROBE], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["EPERM", "EPERM", "EACCES", "allowed", "allowed", "EPERM", "EPERM", "True", "True"], out.stdout


def test_the_torch_compile_toolchain_may_run_the_nvcc_on_the_path_and_triton_s_may_not(tmp_path, monkeypatch):
    """Every inductor compile runs `nvcc --version` where nvcc is on the PATH, and a refused exec fails the
    compile: the problem's process (torch.compile baselines) may start it; a candidate's may not."""
    import shutil

    from kernels.evaluator.fences import toolchain_programs
    nvcc = tmp_path / "nvcc"
    shutil.copy(os.path.realpath(shutil.which("true")), nvcc)  # an ELF program, as nvcc is
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert str(nvcc) in toolchain_programs("torch-compile")
    assert str(nvcc) not in toolchain_programs("triton")


def test_the_torch_compile_toolchain_may_run_the_ptxas_torch_ships(tmp_path, monkeypatch):
    """Inductor sets TRITON_PTXAS_PATH to torch/bin/ptxas (CUDA wheels ship one) at its first compile,
    after the fences are up: the problem's process may start that one from the start."""
    import shutil

    import torch

    from kernels.evaluator.fences import toolchain_programs
    fake = tmp_path / "torch"
    (fake / "bin").mkdir(parents=True)
    shutil.copy(os.path.realpath(shutil.which("true")), fake / "bin" / "ptxas")
    monkeypatch.setattr(torch, "__file__", str(fake / "__init__.py"))
    assert str(fake / "bin" / "ptxas") in toolchain_programs("torch-compile")
    assert str(fake / "bin" / "ptxas") not in toolchain_programs("triton")
