"""Tasks without Temporal: reading task.toml, a candidate as one text and its patch, the fence around a
task's commands, and measuring the shipped examples against their own files."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks import document as doc
from tasks.fence import run_fenced
from tasks.measure import TaskBroken, measure
from tasks.spec import TaskBundle, TaskError, TaskSpec, load_task
from tasks.tunables import read_tunables, with_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tasks"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and mounts as root")


def _bundle(**files) -> TaskBundle:
    spec = TaskSpec(name="t", statement="s", files=["src/*.py"], metric={"command": "true"})
    return TaskBundle(spec=spec, files={"src/a.py": "x = 1\ny = 2\n", "run.sh": "echo\n", **files})


def _write(folder: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


# --- task.toml ---------------------------------------------------------------------------------------
def test_each_example_loads_with_its_editable_files():
    for name in ("slow_suite", "bundle_size", "flaky_test"):
        bundle = load_task(EXAMPLES / name)
        assert bundle.spec.name == name
        assert bundle.starting_files() and "task.toml" not in bundle.starting_files()


@pytest.mark.parametrize("toml, fragment", [
    ('name = "x"\nstatement = "s"\nfiles = ["*.py"]\n', "metric: Field required"),
    ('name = "x"\nstatement = "s"\nfiles = ["../*.py"]\n[metric]\ncommand = "true"\n', "relative path"),
    ('name = "x"\nstatement = "s"\nfiles = ["*.py"]\ntimeout_s = 1e9\n[metric]\ncommand = "true"\n', "timeout_s"),
    ('name = "x"\nstatement = "s"\nfiles = ["*.py"]\n[metric]\ncommand = "true"\nread = "bytes"\n', "metric.read"),
    ('name = "x"\nstatement = "s"\nfiles = ["*.js"]\n[metric]\ncommand = "true"\n', "no file of the task matches"),
    ('name = "x"\nstatement = "s"\nfiles = ["*.py"]\nrepeat = 0\n[metric]\ncommand = "true"\n', "repeat"),
    ('name = "x"\nstatement = "s"\nfiles = ["*.py"]\n[metric]\ncommand = "true"\n[tunables.k]\nfile = "a.py"\n'
     'pattern = "K = (\\\\d+)"\nvalues = ["1"]\n', "matches nothing"),
    ('name = "x"\nstatement = "s"\nfiles = [\n', "not valid TOML"),
])
def test_a_bad_task_is_one_line_naming_the_field(tmp_path, toml, fragment):
    _write(tmp_path, {"task.toml": toml, "a.py": "x = 1\n"})
    with pytest.raises(TaskError) as err:
        load_task(tmp_path)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_a_sparse_file_in_a_task_folder_is_refused_by_its_length_before_it_is_read(tmp_path):
    _write(tmp_path, {"task.toml": 'name = "x"\nstatement = "s"\nfiles = ["*.py"]\n[metric]\ncommand = "true"\n',
                      "a.py": "x = 1\n"})
    with open(tmp_path / "huge.txt", "wb") as f:
        f.truncate(2**40)  # 1 TB, no block: read whole, a MemoryError
    with pytest.raises(TaskError, match="huge.txt: 1099511627776 bytes"):
        load_task(tmp_path)
    (tmp_path / "huge.txt").unlink()
    assert load_task(tmp_path).files["a.py"] == "x = 1\n"  # control


def test_a_folder_without_task_toml_is_refused(tmp_path):
    with pytest.raises(TaskError, match="no task.toml"):
        load_task(tmp_path)


# --- a candidate as one text -----------------------------------------------------------------------
def test_document_round_trip_and_scope():
    bundle = _bundle()
    files = {"src/a.py": "x = 1\n", "src/new.py": "print(2)"}
    assert doc.split(doc.join(files)) == {"src/a.py": "x = 1\n", "src/new.py": "print(2)\n"}
    with pytest.raises(doc.DocumentError, match="run.sh"):
        doc.candidate_files(bundle, doc.join({"run.sh": "rm -rf /\n"}))
    with pytest.raises(doc.DocumentError, match="task.toml"):
        doc.candidate_files(bundle, doc.join({"task.toml": ""}))
    with pytest.raises(doc.DocumentError, match="belongs to no file"):
        doc.split("stray\n### file: src/a.py\n")


def test_a_candidate_splits_in_linear_time_and_keeps_leading_blank_lines():
    """The header's path runs to its line's end: a header line of a million blanks splits at once (a lazy
    group before `\\s*$` took quadratic time), and a file's leading blank lines stay its own."""
    files = {"src/a.py": "\n\nx = 1\n", "src/b.py": "  \ny = 2\n"}
    assert doc.split(doc.join(files)) == files
    assert doc.split("### file: src/a.py \t\r\nx\n") == {"src/a.py": "x\n"}
    t0 = time.monotonic()
    assert list(doc.split("### file: x" + " " * (1 << 20) + "y\n")) == ["x" + " " * (1 << 20) + "y"]
    assert time.monotonic() - t0 < 1.0


def test_patch_applies_with_patch_and_back(tmp_path):
    bundle = _bundle(**{"src/b.py": "last = 1"})
    new = {"src/a.py": "x = 1\ny = 20\n", "src/b.py": "last = 2", "src/c.py": "c = 3\n"}
    files = doc.candidate_files(bundle, doc.join(new))  # a file in the text ends with a newline
    text = doc.patch(bundle, files)
    assert doc.apply_patch(bundle, text) == files
    folder = _write(tmp_path, bundle.files)
    (folder / "best.patch").write_text(text)
    if shutil.which("patch"):
        subprocess.run(["patch", "-p1", "-i", "best.patch"], cwd=folder, check=True, capture_output=True)
        assert (folder / "src/a.py").read_text() == new["src/a.py"]
        assert (folder / "src/b.py").read_text() == files["src/b.py"]
    with pytest.raises(doc.DocumentError, match="does not apply"):
        doc.apply_patch(_bundle(**{"src/a.py": "x = 9\n"}), text)


def test_tunables_read_and_write_the_knobs():
    bundle = load_task(EXAMPLES / "bundle_size")
    start = doc.join(bundle.starting_files())
    tunables, config = read_tunables(bundle, start)
    assert config == {"minify": "false", "target": "es2015"} and tunables["target"] == ("es2015", "es2020", "esnext")
    changed = with_config(bundle, start, {"minify": "true", "target": "esnext"})
    assert read_tunables(bundle, changed)[1] == {"minify": "true", "target": "esnext"}
    assert doc.touched(bundle, doc.candidate_files(bundle, changed)) == ["build.mjs"]


# --- the fence ----------------------------------------------------------------------------------------
@ROOT_ONLY
def test_fenced_command_has_no_network_no_writes_outside_and_leaves_nothing(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    outside = tmp_path / "outside.txt"
    r = run_fenced(f"echo hi > inside.txt; echo x > {outside}; python3 -c 'import socket; "
                   "socket.create_connection((\"127.0.0.1\", 22), timeout=2)'; echo done", work, 30)
    assert (work / "inside.txt").read_text() == "hi\n" and not outside.exists()
    assert "done" in r.output and r.fences["network_namespace"] and r.fences["landlock"]
    marker = f"sleep {9000 + os.getpid() % 500}"
    t0 = time.monotonic()
    r = run_fenced(f"(setsid {marker} &); {marker}", work, 2)
    assert r.timed_out and r.exit_code is None and time.monotonic() - t0 < 20
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert left == "", f"processes outlived the command: {left}"


@ROOT_ONLY
def test_fenced_command_sees_no_secret_and_no_other_process(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-task-fence")
    r = run_fenced("env; ls /proc | grep -c '^[0-9]'; cat /proc/1/cmdline", tmp_path, 30)
    assert "sk-canary-task-fence" not in r.output
    assert r.fences["private_proc"]
    count = int([line for line in r.output.splitlines() if line.isdigit()][0])
    assert count <= 4  # the shell, ls, grep (and cat after them): nothing of the host


def _left(marker: str) -> list[int]:
    time.sleep(0.5)
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@ROOT_ONLY
@pytest.mark.parametrize("subreaper", [True, False], ids=["subreaper", "control-neither-fence"])
def test_without_a_pid_namespace_the_launcher_ends_what_a_command_left(tmp_path, monkeypatch, subreaper):
    """Where no PID namespace is made, a daemon a command started (setsid, its parent gone) comes to the
    launcher, its subreaper, which ends it. The control with neither fence shows the daemon surviving,
    so the test can fail; run_fenced still returns though the daemon holds the output's pipe."""
    monkeypatch.setenv("MARATHON_SANDBOX_PIDNS", "0")
    monkeypatch.setenv("MARATHON_SANDBOX_SUBREAPER", "1" if subreaper else "0")
    marker = f"sleep {8000 + os.getpid() % 500 + (0 if subreaper else 500)}"
    t0 = time.monotonic()
    r = run_fenced(f"(setsid {marker} &); echo started", tmp_path, 3)
    left = _left(marker)
    for pid in left:
        os.kill(pid, 9)
    assert not r.fences["pid_namespace"] and time.monotonic() - t0 < 60
    if subreaper:
        assert r.ok and "started" in r.output and r.fences["orphans_ended"] >= 1
        assert left == [], f"processes outlived the command: {left}"
    else:
        assert left, "the control's daemon should have outlived the command"


@ROOT_ONLY
def test_without_root_the_command_gets_a_pid_namespace_of_a_user_namespace(tmp_path):
    """A launcher without root's capabilities (only CAP_SETFCAP, which mapping its uid into a user
    namespace needs) makes its PID, mount and network namespaces inside a user namespace of its own, and
    the command gives up that namespace's capabilities: a daemon dies with it, and /proc shows nothing of
    the host."""
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv to start a process without capabilities")
    marker = f"sleep {7000 + os.getpid() % 500}"
    script = ("import json, sys\nfrom pathlib import Path\nfrom tasks.fence import run_fenced\n"
              f"r = run_fenced(\"(setsid {marker} &); ls /proc | grep -c '^[0-9]'\", Path(sys.argv[1]), 20)\n"
              "print(json.dumps({'out': r.output, 'fences': r.fences, 'ok': r.ok}))\n")
    out = subprocess.run(["setpriv", "--bounding-set", "-all,+setfcap", "--inh-caps", "-all", "--ambient-caps", "-all",
                          sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    left = _left(marker)
    for pid in left:
        os.kill(pid, 9)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    fences = report["fences"]
    if fences["namespaces_as"] == "":
        pytest.skip("this kernel refuses a user namespace here")
    assert report["ok"] and fences["namespaces_as"] == "user namespace", report
    assert fences["pid_namespace"] and fences["private_proc"] and fences["network_namespace"], fences
    assert fences["capabilities_dropped"] and fences["landlock"], fences
    assert int(report["out"].split()[0]) <= 4 and left == [], (report, left)


@ROOT_ONLY
def test_a_command_that_writes_past_its_quota_is_killed(tmp_path):
    """The quota counts what the command adds to its folder: 4 MiB past a 1 MiB quota ends it within
    seconds (not at its time limit); the control writes 256 KiB and runs to its end."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "already.bin").write_bytes(b"x" * (2 << 20))  # what the folder held before counts for nothing
    t0 = time.monotonic()
    r = run_fenced("head -c 4194304 /dev/zero > big.bin; sleep 60; echo never", work, 90, disk_quota=1 << 20)
    assert r.disk_exceeded and not r.ok and r.exit_code is None and "never" not in r.output
    assert time.monotonic() - t0 < 45
    r = run_fenced("head -c 262144 /dev/zero > small.bin; sleep 2; echo done", work, 90, disk_quota=1 << 20)
    assert r.ok and not r.disk_exceeded and "done" in r.output
    # files count too: a walk that stopped at its cap would miss the bytes past it
    r = run_fenced("mkdir many; cd many; seq 1 300 | xargs touch; sleep 60; echo never", work, 90, file_quota=100)
    assert r.disk_exceeded and "never" not in r.output
    r = run_fenced("mkdir few; cd few; seq 1 50 | xargs touch; sleep 2; echo done", work, 90, file_quota=100)
    assert r.ok and not r.disk_exceeded


def test_copies_a_killed_measurement_left_are_removed_and_live_ones_kept(tmp_path):
    """A measurement holds a lock on its copies' folder while it lives; a later one removes folders of
    ours that are old and unlocked, and leaves alone a locked one, a young one, a link and others' names."""
    from kernels.evaluator.isolation import held
    from tasks.measure import COPY_PREFIX, remove_stale_copies
    old = time.time() - 3600
    folders = {name: tmp_path / f"{COPY_PREFIX}{name}" for name in ("dead", "live", "young")}
    for folder in folders.values():
        (folder / "baseline").mkdir(parents=True)
    (tmp_path / "other-dead").mkdir()
    (tmp_path / f"{COPY_PREFIX}link").symlink_to(tmp_path / "other-dead")
    for path in (folders["dead"], folders["live"], tmp_path / "other-dead"):
        os.utime(path, (old, old))
    with held(folders["live"]):
        assert remove_stale_copies(tmp_path) == [f"{COPY_PREFIX}dead"]
    assert not folders["dead"].exists() and folders["live"].exists() and folders["young"].exists()
    assert (tmp_path / "other-dead").exists() and (tmp_path / f"{COPY_PREFIX}link").is_symlink()
    assert remove_stale_copies(tmp_path) == [f"{COPY_PREFIX}live"]  # its measurement is gone now


# --- measuring ----------------------------------------------------------------------------------------
def _measure(name: str, change: tuple[str, str], tmp_path: Path):
    bundle = load_task(EXAMPLES / name)
    files = bundle.starting_files()
    path = next(p for p, t in files.items() if change[0] in t)
    return bundle, measure(bundle, doc.join({path: files[path].replace(*change)}), tmp_path / "cache")


@ROOT_ONLY
def test_slow_suite_fixed_is_faster_and_a_cheat_is_caught(tmp_path):
    bundle, v = _measure("slow_suite", ('SEEN_AS = "list"', 'SEEN_AS = "set"'), tmp_path)
    assert v.status == "ok", v.reason
    m = v.metric
    assert m.gain > 1.5 and len(m.samples) == len(m.baseline_samples) == bundle.spec.repeat
    assert v.best_speedup() == m.gain and m.changed == ["src/catalog.py"]
    cheat = measure(bundle, doc.join({"src/catalog.py": "import os\nos._exit(0)\n"}), tmp_path / "cache")
    assert cheat.status == "incorrect" and "did the checks run" in cheat.reason
    edits_tests = bundle.files["src/catalog.py"] + "\nimport pathlib\npathlib.Path('tests/test_catalog.py').write_text('')\n"
    assert measure(bundle, doc.join({"src/catalog.py": edits_tests}), tmp_path / "cache").status == "rejected"
    hangs = bundle.files["src/catalog.py"].replace("def normalise(code: str) -> str:\n",
                                                   "def normalise(code: str) -> str:\n    while True:\n        pass\n")
    bundle = bundle.model_copy(update={"spec": bundle.spec.model_copy(update={"timeout_s": 3.0})})
    slow = measure(bundle, doc.join({"src/catalog.py": hangs}), tmp_path / "cache")
    assert slow.status == "timeout", slow.reason


@ROOT_ONLY
def test_flaky_test_fixed_never_fails(tmp_path):
    _, v = _measure("flaky_test", ("LOCKED = False", "LOCKED = True"), tmp_path)
    assert v.status == "ok", v.reason
    assert v.metric.value == 0.0 and v.metric.baseline > 0 and v.metric.gain > 1


@ROOT_ONLY
@pytest.mark.skipif(shutil.which("npm") is None, reason="needs node and npm")
def test_bundle_minified_is_smaller(tmp_path):
    _, v = _measure("bundle_size", ("minify: false", "minify: true"), tmp_path)
    assert v.status == "ok", v.reason
    assert v.metric.value < v.metric.baseline and v.metric.unit == "bytes"


@ROOT_ONLY
def test_a_task_whose_own_files_fail_is_broken_not_the_candidate(tmp_path):
    _write(tmp_path / "t", {"task.toml": 'name = "b"\nstatement = "s"\nfiles = ["a.py"]\nguard = "exit 3"\n'
                            '[metric]\ncommand = "true"\n', "a.py": "x = 1\n"})
    with pytest.raises(TaskBroken, match="its own files fail its guard"):
        measure(load_task(tmp_path / "t"), None, tmp_path / "cache")
    guarded = measure(load_task(EXAMPLES / "slow_suite"), None, tmp_path / "cache", mode="test")
    assert guarded.status == "ok" and guarded.metric.value is None and guarded.mode == "test"


@ROOT_ONLY
def test_fenced_command_reads_only_the_system_and_its_folder(tmp_path):
    secret = tmp_path / "elsewhere.txt"
    secret.write_text("private\n")
    work = tmp_path / "w"
    work.mkdir()
    (work / "mine.txt").write_text("mine\n")
    r = run_fenced(f"cat mine.txt; cat {secret}; python3 -c 'print(1 + 1)'", work, 30)
    assert "mine" in r.output and "private" not in r.output and "2" in r.output.split()


@ROOT_ONLY
def test_a_candidate_that_opens_a_network_connection_is_rejected(tmp_path):
    bundle = load_task(EXAMPLES / "slow_suite")
    reaches_out = bundle.files["src/catalog.py"] + (
        "\nimport socket\ntry:\n    socket.create_connection(('198.51.100.7', 443), timeout=1)\nexcept OSError:\n    pass\n")
    v = measure(bundle, doc.join({"src/catalog.py": reaches_out}), tmp_path / "cache")
    assert v.status == "rejected" and "network connection" in v.reason, v.reason
    assert v.sandbox.get("network_watch") is True


def test_runs_that_overlap_are_called_noise_not_a_gain():
    from tasks.measure import overlap
    assert overlap([0.30, 0.41, 0.35], [0.37, 0.40, 0.36])  # the same files on a busy machine
    assert not overlap([0.07, 0.09, 0.08], [0.37, 0.40, 0.36])  # a real gain: the ranges stand apart
    assert not overlap([1399.0], [2311.0]) and not overlap([5.0], [5.0])  # one run each: nothing to tell


class _HostService:
    """A host service on a Unix socket of a path (as docker.sock or D-Bus: open to every user), which
    answers each connection with a secret and counts them."""

    def __init__(self, folder: Path) -> None:
        import secrets
        import socket
        import threading
        self.secret = "host-service-secret-" + secrets.token_hex(8)
        folder.mkdir(mode=0o755)
        self.path = str(folder / "service.sock")
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o777)
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn = self.sock.accept()[0]
            except OSError:
                continue
            self.accepted += 1
            with conn:
                conn.sendall(self.secret.encode())

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()

    def client(self) -> str:
        return ("import socket\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(3)\n"
                f"s.connect({self.path!r})\nprint('GOT', s.recv(200).decode())\n")


@pytest.fixture
def host_service():
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="marathon-host-service-", dir="/tmp"))
    service = _HostService(folder / "run")
    try:
        yield service
    finally:
        service.close()
        shutil.rmtree(folder, ignore_errors=True)


@ROOT_ONLY
@pytest.mark.parametrize("network", [False, True], ids=["command", "setup"])
def test_a_fenced_command_reaches_no_unix_socket_of_a_path(tmp_path, host_service, network):
    """A Unix socket of a path is reached through the file system, which neither the network
    namespace nor Landlock holds: the command's socket(AF_UNIX) is refused (also in the setup, which
    may use the network), and a datagram pair, which could sendto() a path, too; a stream pair, which
    reaches nothing, still works. The control, the same client unfenced, gets the secret."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "client.py").write_text(host_service.client())
    (work / "pairs.py").write_text(
        "import socket\nsocket.socketpair()\nprint('stream pair ok')\n"
        "try:\n    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n    print('dgram pair MADE')\n"
        "except PermissionError:\n    print('dgram pair refused')\n")
    r = run_fenced("python3 client.py; python3 pairs.py", work, 30, network=network)
    assert "PermissionError" in r.output and "GOT" not in r.output, r.output
    assert "stream pair ok" in r.output and "dgram pair refused" in r.output, r.output
    assert host_service.secret not in r.output and host_service.accepted == 0
    assert r.fences["unix_sockets_refused"] is True, r.fences
    control = subprocess.run([sys.executable, str(work / "client.py")], capture_output=True, text=True, timeout=30)
    assert host_service.secret in control.stdout and host_service.accepted == 1, control


@ROOT_ONLY
def test_a_candidate_that_asks_a_host_service_learns_nothing(tmp_path, host_service):
    """A task's candidate whose code asks a host service on a Unix socket for its secret: refused, and the
    secret in no part of the verdict; the task's own test suite still runs inside the fence."""
    bundle = load_task(EXAMPLES / "slow_suite")
    asks = bundle.files["src/catalog.py"] + "\ntry:\n" + "".join(
        "    " + line + "\n" for line in host_service.client().splitlines()) + (
        "except OSError as exc:\n    print('refused', exc)\n")
    v = measure(bundle, doc.join({"src/catalog.py": asks}), tmp_path / "cache", mode="test")
    assert host_service.accepted == 0 and host_service.secret not in v.model_dump_json(), v
    assert v.status == "ok", v.reason  # it caught the refusal: the suite ran and passed


@ROOT_ONLY
def test_a_command_that_prints_gigabytes_holds_only_the_tail_in_the_worker(tmp_path):
    """The worker reads a command's output as it comes and keeps its last OUTPUT_CAP bytes: 300 MB
    printed costs the worker no more than a few of those (read whole, it held all of it)."""
    import tracemalloc
    from tasks.fence import OUTPUT_CAP
    loud = "import sys; sys.stdout.buffer.write(b'x' * 300_000_000); print(); print('the end')"
    tracemalloc.start()
    try:
        r = run_fenced(f"python3 -c \"{loud}\"", tmp_path, 60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exit_code == 0, r.output[-500:]
    assert r.output.startswith("[... earlier output cut ...]") and r.output.rstrip().endswith("the end")
    assert len(r.output) <= OUTPUT_CAP + 100
    assert peak < 8 * OUTPUT_CAP, peak
