"""Hostile task candidates and task folders against the worker's own (unfenced) part of measuring a task
(tasks/measure.py): it writes the candidate's files into a copy of the task's folder and reads the copy
back, and neither may reach outside the copy or stall. Each case has an honest control."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tasks import document as doc
from tasks.measure import TaskBroken, measure
from tasks.spec import TaskBundle, TaskSpec, editable

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and mounts as root")
pytestmark = pytest.mark.timeout(300)


def _bundle(setup: str | None = None, metric: str = "true", files: list[str] | None = None) -> TaskBundle:
    spec = TaskSpec(name="t", statement="s", files=files or ["src/*.py"], metric={"command": metric}, setup=setup,
                    repeat=1, timeout_s=60)
    return TaskBundle(spec=spec, files={"src/a.py": "x = 1\n", "run.sh": "echo\n"})


def _measured(bundle: TaskBundle, document: str, cache: Path, mode: str = "full"):
    """measure() in a thread with a deadline: a worker that blocks on a file fails here instead of hanging."""
    done: list = []

    def go() -> None:
        try:
            done.append(measure(bundle, document, cache, mode=mode))
        except Exception as exc:  # noqa: BLE001 - the test looks at what was raised
            done.append(exc)
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(120)
    assert done, "measuring blocked (the worker read or wrote a file it should not have waited on)"
    return done[0]


@pytest.mark.parametrize("path", ["src/../../../../../../../../tmp/{mark}.py", "../src/{mark}.py",
                                  "src/./../../{mark}.py", "/tmp/src/{mark}.py"])
def test_a_candidate_path_that_leaves_the_folder_is_not_editable_and_writes_nothing(tmp_path, path):
    mark = f"marathon-escape-{os.getpid()}"
    bundle = _bundle(files=["src/*.py", "*.py"])
    path = path.format(mark=mark)
    assert not editable(bundle.spec, path)
    assert editable(bundle.spec, "src/b.py") and editable(bundle.spec, "src/deep/b.py")  # control
    v = _measured(bundle, doc.join({path: "print('the worker wrote this')\n"}), tmp_path / "cache", mode="test")
    assert v.status == "rejected" and "outside the files" in v.reason, v.reason
    assert not (Path("/tmp") / f"{mark}.py").exists() and not (Path("/tmp/src") / f"{mark}.py").exists()
    with pytest.raises(doc.DocumentError):
        doc.assert_editable(bundle, [path])


@ROOT_ONLY
def test_a_link_the_setup_left_is_never_written_through_by_the_worker(tmp_path):
    target = tmp_path / "outside.py"
    target.write_text("untouched\n")
    bundle = _bundle(setup=f"ln -s {target} src/b.py")
    with pytest.raises(TaskBroken, match="through a link"):
        raise _measured(bundle, doc.join({"src/b.py": "print('through the link')\n"}), tmp_path / "cache", mode="test")
    assert target.read_text() == "untouched\n"
    control = _measured(bundle, doc.join({"src/a.py": "x = 2\n"}), tmp_path / "cache", mode="test")
    assert control.status == "ok", control.reason


@ROOT_ONLY
def test_a_fifo_a_command_leaves_in_place_of_a_fixed_file_does_not_stall_the_worker(tmp_path):
    """The candidate's code replaces a file it may not edit with a FIFO: the worker's check of the fixed
    files must not block opening it, and the change is a rejection."""
    bundle = _bundle(metric="python3 -c 'import src.a'")
    fifo = "import os\nos.remove('run.sh')\nos.mkfifo('run.sh')\n"
    v = _measured(bundle, doc.join({"src/a.py": fifo}), tmp_path / "cache")
    assert v.status == "rejected" and "run.sh" in v.reason, v.reason
    control = _measured(bundle, doc.join({"src/a.py": "x = 2\n"}), tmp_path / "cache")
    assert control.status == "ok", control.reason


@ROOT_ONLY
def test_what_a_command_prints_leaves_without_terminal_controls(tmp_path):
    """The candidate's code and the task's own command print escape sequences: the verdict and a broken
    task's message show them as text."""
    bundle = _bundle(metric="python3 -c 'import src.a'")
    prints = "import sys\nsys.stdout.write('\\x1b]0;owned\\x07\\x1b[2J')\nsys.exit(4)\n"
    v = _measured(bundle, doc.join({"src/a.py": prints}), tmp_path / "cache")
    assert v.status == "incorrect" and "\x1b" not in v.log_tail + v.reason, v.reason
    assert "\\x1b]0;owned" in v.log_tail
    broken = _measured(_bundle(metric="printf '\\033]0;owned\\007\\033[2J'; exit 4"), doc.join({"src/a.py": "x = 2\n"}),
                       tmp_path / "cache")
    assert isinstance(broken, TaskBroken) and "\x1b" not in str(broken) and "\\x1b]0;owned" in str(broken)


# --- a task's regular expressions: matched in the worker, over output the task chooses ----------------
@ROOT_ONLY
def test_a_catastrophic_backtracking_pattern_over_the_tasks_output_finishes_at_once(tmp_path):
    """`(a+)+b` over a line of a's: a backtracking engine takes 2^n steps (10 s at n = 26, doubling per
    character) in the worker's own process, holding the GIL; RE2 takes linear time. The guard and the
    metric each print 100,000 a's; the expect pattern and the `regex:` metric both fail to match, at
    once. The control prints the b."""
    def task(command: str, read: str, expect: str) -> TaskBundle:
        spec = TaskSpec(name="t", statement="s", files=["src/*.py"], repeat=1, timeout_s=60,
                        guard={"command": command, "expect": expect}, metric={"command": command, "read": read})
        return TaskBundle(spec=spec, files={"src/a.py": "x = 1\n"})
    flood = "python3 -c \"print('a' * 100000)\""
    t0 = time.monotonic()
    v = _measured(task(flood, "wall_time", "(a+)+b"), doc.join({"src/a.py": "x = 2\n"}), tmp_path / "c1", mode="test")
    assert v.status == "incorrect" and "without printing what the task expects" in v.reason, v.reason
    broken = _measured(task(flood, "regex:(?:a+)+b(\\d)", "a"), doc.join({"src/a.py": "x = 2\n"}), tmp_path / "c2")
    assert isinstance(broken, TaskBroken) and "figure" in str(broken), broken
    assert time.monotonic() - t0 < 60
    ok = _measured(task("python3 -c \"print('a' * 100000 + 'b1')\"", "regex:(?:a+)+b(\\d)", "(a+)+b"),
                   doc.join({"src/a.py": "x = 2\n"}), tmp_path / "c3")
    assert not isinstance(ok, Exception) and ok.status == "ok" and ok.metric.value == 1.0, ok


def test_a_pattern_that_would_backtrack_is_matched_in_linear_time():
    from tasks import patterns
    for n in (1000, 100_000, 256 * 1024):
        t0 = time.monotonic()
        assert patterns.search("(a+)+b", "a" * n) is None
        assert patterns.search("(x+x+)+y", "x" * n) is None
        assert time.monotonic() - t0 < 1.0, n
    assert patterns.search("(a+)+b", "a" * 50 + "b").group(1) == "a" * 50  # control: it still matches


@pytest.mark.parametrize("field, task", [
    ("guard.expect", {"guard": {"command": "true", "expect": "(a)\\1"}, "metric": {"command": "true"}}),
    ("metric.read", {"metric": {"command": "true", "read": "regex:(?=x)(\\d+)"}}),
    ("tunables.k.pattern", {"metric": {"command": "true"},
                            "tunables": {"k": {"file": "src/a.py", "pattern": "(?<=x = )(\\d)", "values": ["1"]}}}),
])
def test_a_pattern_the_linear_engine_cannot_take_is_refused_naming_the_field(field, task):
    from pydantic import ValidationError
    from tasks.spec import describe
    with pytest.raises(ValidationError) as err:
        TaskSpec(name="t", statement="s", files=["src/*.py"], **task)
    line = describe(err.value, "task.toml")
    assert field in line and "RE2" in line and "\n" not in line, line


# --- sparse files: no disk, yet read or copied at their full length ------------------------------------
QUOTA = 16 * 2**20


def _peak_rss() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@ROOT_ONLY
def test_a_sparse_file_the_setup_makes_fails_on_the_quota_and_is_never_copied(tmp_path, monkeypatch):
    """`truncate -s 2G` holds no block; the quota weighs a file at its length too, and weighs a command
    that ends before its first poll once it ends: the setup fails on the quota, one line, at once. The
    control's setup writes a small file and measures."""
    monkeypatch.setenv("MARATHON_SANDBOX_DISK", str(QUOTA))
    rss, t0 = _peak_rss(), time.monotonic()
    broken = _measured(_bundle(setup="truncate -s 2G big.bin"), doc.join({"src/a.py": "x = 2\n"}), tmp_path / "cache")
    assert isinstance(broken, TaskBroken) and "disk quota" in str(broken) and "\n" not in str(broken), broken
    assert time.monotonic() - t0 < 30 and _peak_rss() - rss < 256 * 2**20
    control = _measured(_bundle(setup="head -c 65536 /dev/zero > small.bin"), doc.join({"src/a.py": "x = 2\n"}),
                        tmp_path / "cache")
    assert not isinstance(control, Exception) and control.status == "ok", control


@ROOT_ONLY
def test_the_worker_copies_no_file_longer_than_the_folder_may_hold(tmp_path, monkeypatch):
    """A prepared folder that holds a sparse 2 GB file anyway (made past the quota's weighing): the
    worker's copy weighs each file by its length before reading it, and the measurement fails as the
    task's error, one line, without writing the 2 GB (a dense copy per measurement)."""
    from tasks.measure import prepared_tree
    monkeypatch.setenv("MARATHON_SANDBOX_DISK", str(QUOTA))
    bundle = _bundle()
    tree = prepared_tree(bundle, tmp_path / "cache")
    with open(tree / "big.bin", "wb") as f:
        f.truncate(2 * 2**30)
    rss, t0 = _peak_rss(), time.monotonic()
    broken = _measured(bundle, doc.join({"src/a.py": "x = 2\n"}), tmp_path / "cache")
    assert isinstance(broken, TaskBroken) and "big.bin" in str(broken) and "worker copies no more" in str(broken), broken
    assert "\n" not in str(broken) and time.monotonic() - t0 < 30 and _peak_rss() - rss < 256 * 2**20
    (tree / "big.bin").unlink()
    control = _measured(bundle, doc.join({"src/a.py": "x = 2\n"}), tmp_path / "cache")
    assert not isinstance(control, Exception) and control.status == "ok", control


@ROOT_ONLY
def test_a_candidate_that_stretches_a_fixed_file_sparse_is_rejected_without_reading_it(tmp_path, monkeypatch):
    """The candidate's code truncates a file it may not edit to 3 GB (no block written): the quota
    weighs it at its length and rejects the candidate; the worker's digest of the fixed files reads a
    chunk at a time and no further than the folder may hold (a 3 GB read was a 3 GB buffer)."""
    from tasks.measure import _digest
    monkeypatch.setenv("MARATHON_SANDBOX_DISK", str(QUOTA))
    bundle = _bundle(metric="python3 -c 'import src.a'")
    stretch = "import os\nos.truncate('run.sh', 3 * 2**30)\n"
    rss, t0 = _peak_rss(), time.monotonic()
    v = _measured(bundle, doc.join({"src/a.py": stretch}), tmp_path / "cache")
    assert not isinstance(v, Exception) and v.status == "rejected" and "disk quota" in v.reason, v
    assert time.monotonic() - t0 < 30 and _peak_rss() - rss < 256 * 2**20
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(3 * 2**30)
    assert _digest(big, QUOTA).startswith(f"{3 * 2**30} bytes, past") and _peak_rss() - rss < 256 * 2**20
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * (3 * 2**20))  # control: read in chunks, the digest of its content
    import hashlib
    assert _digest(small, QUOTA) == hashlib.sha256(b"x" * (3 * 2**20)).hexdigest()
