"""Tasks without Temporal: reading task.toml, a candidate as one text and its patch, the fence around a
task's commands, and measuring the shipped examples against their own files."""
from __future__ import annotations

import os
import shutil
import subprocess
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
