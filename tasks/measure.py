"""Measuring a task's candidate honestly: in fresh copies of the task folder, fenced (tasks.fence),
against the task's own files measured in the same call, runs interleaved.

    measure(bundle, document, cache_root) -> Verdict   (its `metric` holds the figures)

1. The task's folder is made once per worker and task (its files written, `setup` run: the one
   command that may reach the network) and copied afresh for every measurement: one copy for the
   starting files (the baseline), one with the candidate's files written over them.
2. A candidate that names a file outside `files` is rejected before anything runs.
3. The guard runs on both copies; the candidate's must pass (and print what `expect` asks, with no
   fewer of its number than the baseline's). A failure is a verdict, never an exception; only a task
   whose own files fail (TaskBroken) raises.
4. The metric runs `repeat` times on each copy, in alternating order (baseline first in even
   rounds, candidate first in odd ones), so drift of the machine falls on both alike. The median
   counts; for `failure_rate`, the fraction of failed runs.
5. Any file of the task outside `files` that a run changed (the guard's tests, the metric's script)
   rejects the candidate."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import stat
import statistics
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Literal

from kernels.evaluator.confinement import scrub
from kernels.evaluator import isolation
from kernels.evaluator.isolation import MAX_FILES
from kernels.evaluator.verdict import MetricResult, Verdict
from kernels.settings import settings
from tasks import document as doc
from tasks import patterns
from tasks.fence import CommandResult, run_fenced
from tasks.spec import METRIC_LINE, TaskBundle, editable

TAIL = 3000  # characters of a command's output kept in a verdict
COPY_PREFIX = "marathon-task-"  # a measurement's copies, in a folder under the system's temporary folder
CHUNK = 1 << 20  # bytes the worker reads from a task's folder at a time
STALE_AFTER_S = 600.0  # a copies' folder older than this, its lock free, was left by a measurement that died
Mode = Literal["test", "full"]  # the guard alone, or the guard and the metric


class TaskBroken(ValueError):
    """The task's own files fail its guard or give no figure: the task is broken, not the candidate.
    A run ends at once on it, saying so (one line)."""


def gain(spec_direction: str, read: str, baseline: float, value: float, repeat: int) -> float:
    """How many times better than the baseline. A failure rate of 0 is as good as half a failure in
    `repeat` runs can tell apart: the ratio stays finite."""
    eps = 0.5 / repeat if read == "failure_rate" else 1e-12
    if spec_direction == "lower":
        return (baseline + eps) / (value + eps)
    return (value + eps) / (baseline + eps)


def overlap(samples: list[float], baseline: list[float]) -> bool:
    """Whether two sets of runs overlap in range: then their medians' ratio does not tell the two
    apart. Not for a failure rate, whose runs are each 0 or 1."""
    return len(samples) > 1 and min(samples) <= max(baseline) and min(baseline) <= max(samples)


def _tail(text: str, n: int = TAIL) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def prepared_tree(bundle: TaskBundle, cache_root: Path) -> Path:
    """The task's folder on this worker, made once (files written, `setup` run) and reused."""
    key = bundle.digest()[:24]
    cache_root.mkdir(parents=True, exist_ok=True)
    tree = cache_root / key / "tree"
    with open(cache_root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (cache_root / key / "ready").is_file():
            return tree
        shutil.rmtree(cache_root / key, ignore_errors=True)
        tree.mkdir(parents=True)
        for rel, text in bundle.files.items():
            path = tree / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        # what the folder may weigh once set up: its files and the quota its setup runs under
        allowed = isolation.disk_usage(tree, cap=1 << 40)[0] + settings().sandbox_disk
        (cache_root / key / "allowed").write_text(str(allowed))
        if bundle.spec.setup:
            result = run_fenced(bundle.spec.setup, tree, bundle.spec.timeout_s, network=True)
            if not result.ok:
                shutil.rmtree(cache_root / key, ignore_errors=True)
                raise TaskBroken(f"the task's setup ({bundle.spec.setup!r}) failed "
                                  f"({_ended(result)}): "
                                  f"{_tail(result.output, 600)}")
        (cache_root / key / "ready").write_text("")
    return tree


def allowance(bundle: TaskBundle, tree: Path) -> int:
    """Bytes a prepared folder may hold (the larger of its files' blocks and lengths, as the quota weighs
    them): the task's files and what its setup may add. Nothing the worker copies or reads from a
    task's folder goes past it."""
    try:
        return int((tree.parent / "allowed").read_text(encoding="ascii", errors="strict")[:40])
    except (OSError, ValueError):  # a folder prepared before the allowance was written down
        return settings().sandbox_disk + sum(len(t.encode()) + 4096 for t in bundle.files.values())


def _no_specials(folder: str, names: list[str]) -> set[str]:
    """What a copy leaves out: anything but files, folders and links (a FIFO the task's setup made
    would block the worker's copy)."""
    out = set()
    for name in names:
        mode = os.lstat(os.path.join(folder, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            out.add(name)
    return out


def _copy(tree: Path, into: Path, files: dict[str, str] | None, task: str, allowed: int) -> Path:
    """A fresh copy of the task's folder with the candidate's files written over it. The worker writes
    here unfenced, so through no link: the task's setup may have left links to anywhere in its folder
    (the fenced commands cannot write through them, Landlock checks the target; the worker could).
    It copies no more than `allowed` bytes, weighing each file by its length before reading it: a
    sparse file (`truncate -s 1T`) holds no disk but its copy would hold all of it."""
    left = [allowed]

    def copy_file(src: str, dst: str) -> None:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return
            if st.st_size > left[0]:
                raise TaskBroken(f"task {task}: {os.path.relpath(src, tree)} in its folder is {st.st_size} bytes long, "
                                 f"past the {allowed} bytes its folder may hold (its files and the disk quota its "
                                 "setup runs under, MARATHON_SANDBOX_DISK; a sparse file counts at its length): "
                                 "the worker copies no more")
            left[0] -= st.st_size
            with open(dst, "xb") as out:
                for chunk in _chunks(f, st.st_size):
                    out.write(chunk)
        shutil.copystat(src, dst, follow_symlinks=False)

    try:
        shutil.copytree(tree, into, symlinks=True, ignore=_no_specials, copy_function=copy_file)
    except (shutil.Error, OSError) as exc:
        raise TaskBroken(f"task {task}: its folder cannot be copied: {_tail(str(exc), 300)}") from None
    for rel, text in (files or {}).items():
        path = into
        for part in PurePosixPath(rel).parts:
            path = path / part
            if path.is_symlink():
                raise TaskBroken(f"task {task}: {rel} passes through a link in the task's folder (made by its "
                                 "setup?); the worker writes no candidate file through a link")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise TaskBroken(f"task {task}: {rel} cannot be written in a copy of its folder ({exc.strerror})") from None
        with os.fdopen(fd, "w") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise TaskBroken(f"task {task}: {rel} is not a regular file in the task's folder")
            f.write(text)
    return into


def _chunks(f, size: int):
    """At most `size` bytes of `f`, CHUNK at a time."""
    while size > 0:
        chunk = f.read(min(CHUNK, size))
        if not chunk:
            return
        size -= len(chunk)
        yield chunk


def _digest(path: Path, limit: int) -> str | None:
    """A file's content digest as the worker reads it: a link's is its target's name (never followed),
    and what is not a regular file (a FIFO a command left would block the read) has none. Read a chunk
    at a time, and only up to `limit` bytes: a longer file (it grew past what its folder may hold) is
    told by its length."""
    try:
        if path.is_symlink():
            return "link:" + os.readlink(path)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a file"
        if st.st_size > limit:
            return f"{st.st_size} bytes, past the {limit} its folder may hold"
        h = hashlib.sha256()
        for chunk in _chunks(f, limit + 1):
            h.update(chunk)
        return h.hexdigest()


def _fixed_digests(bundle: TaskBundle, root: Path, limit: int) -> dict[str, str | None]:
    return {rel: _digest(root / rel, limit) for rel in bundle.files if not editable(bundle.spec, rel)}


def remove_stale_copies(root: Path, older_than_s: float = STALE_AFTER_S) -> list[str]:
    """Remove the copies' folders that measurements killed with their worker left behind (a SIGKILL runs
    no clean-up): a folder of ours, not a link, older than `older_than_s`, whose lock (the measurement
    holds its folder while it lives: isolation.held) nobody holds. Returns the names removed."""
    return isolation.remove_unheld(sorted(root.glob(COPY_PREFIX + "*")), older_than_s)


def _ended(result: CommandResult) -> str:
    """How a command that failed ended, in a few words."""
    if result.disk_exceeded:
        return (f"wrote more than its disk quota (MARATHON_SANDBOX_DISK bytes, or {MAX_FILES} files) beneath its "
                "folder and was killed")
    return "timed out" if result.timed_out else f"exit {result.exit_code}"


def read_metric(read: str, result: CommandResult) -> float | None:
    """The number a metric run gives, or None when it gives none (a failed run, a missing line)."""
    if read == "failure_rate":
        return 0.0 if result.ok else 1.0
    if not result.ok:
        return None
    if read == "wall_time":
        return result.wall_s
    if read.startswith("METRIC "):
        name = read[7:]
        values = [float(v) for k, v in METRIC_LINE.findall(result.output) if k == name]
        return values[-1] if values else None
    m = patterns.search(read[6:], result.output, patterns.MULTILINE)  # RE2: linear in the output
    try:
        return float(m.group(1)) if m else None
    except (TypeError, ValueError):  # an optional group that took no part: None
        return None


def _guard_count(expect: str, output: str) -> tuple[bool, float | None]:
    m = patterns.search(expect, output, patterns.MULTILINE)  # RE2: linear in the output
    if not m:
        return False, None
    try:
        return True, float(m.group(1)) if m.groups() else None
    except (TypeError, ValueError):
        return True, None


def measure(bundle: TaskBundle, document: str | None, cache_root: Path, *, mode: Mode = "full",
            repeat: int | None = None, heartbeat=None, kernel: str = "candidate") -> Verdict:
    """A candidate (its text; None: the task's own files) against the task's own files: a Verdict
    whose `metric` holds the figures. A broken task raises TaskBroken; a bad candidate is a verdict.
    What the commands printed leaves scrubbed, as an evaluation's verdict does (confinement.scrub)."""
    try:
        verdict = _measure(bundle, document, cache_root, mode, repeat, heartbeat, kernel)
    except TaskBroken as exc:
        raise TaskBroken(scrub(str(exc))) from None
    return Verdict.model_validate(scrub(verdict.model_dump()))


def _measure(bundle: TaskBundle, document: str | None, cache_root: Path, mode: Mode, repeat: int | None,
             heartbeat, kernel: str) -> Verdict:
    spec = bundle.spec
    t0 = time.monotonic()
    metric = MetricResult(name=spec.metric.read, unit=spec.metric.shown_unit, direction=spec.metric.direction)
    verdict = Verdict(status="ok", reason="", problem=spec.name, kernel=kernel, mode=mode, device="cpu",
                      timing_meaningful=True, metric=metric,
                      source_sha256=hashlib.sha256((document or "").encode()).hexdigest())
    beat = heartbeat or (lambda: None)
    try:
        files = doc.candidate_files(bundle, document) if document is not None else bundle.starting_files()
    except doc.DocumentError as exc:
        return _done(verdict, t0, "rejected", str(exc))
    metric.changed = doc.touched(bundle, files)
    n = repeat or spec.repeat
    tree = prepared_tree(bundle, cache_root)
    allowed = allowance(bundle, tree)
    remove_stale_copies(Path(tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix=COPY_PREFIX) as tmp, isolation.held(tmp):
        base = _copy(tree, Path(tmp) / "baseline", None, spec.name, allowed)
        cand = _copy(tree, Path(tmp) / "candidate", files, spec.name, allowed)
        fixed = _fixed_digests(bundle, base, allowed)
        if spec.guard:
            beat()
            g = run_fenced(spec.guard.command, base, spec.timeout_s)
            verdict.sandbox.update(g.fences)
            if not g.ok:
                raise TaskBroken(f"task {spec.name}: its own files fail its guard "
                                 f"({_ended(g)}): {_tail(g.output, 300)}")
            base_count = _guard_count(spec.guard.expect, g.output)[1] if spec.guard.expect else None
            beat()
            g = run_fenced(spec.guard.command, cand, spec.timeout_s)
            metric.guard_tail = _tail(g.output)
            if g.network_attempts:
                return _done(verdict, t0, "rejected", _offline(g.network_attempts, "its guard"))
            if g.disk_exceeded:
                return _done(verdict, t0, "rejected", f"the guard {_ended(g)}")
            if g.timed_out:
                return _done(verdict, t0, "timeout", f"the guard timed out after {spec.timeout_s:g} s")
            if not g.ok:
                return _done(verdict, t0, "incorrect", f"the guard failed (exit {g.exit_code}): {_tail(g.output, 400)}")
            if spec.guard.expect:
                found, count = _guard_count(spec.guard.expect, g.output)
                if not found:
                    return _done(verdict, t0, "incorrect", "the guard passed without printing what the task "
                                 f"expects ({spec.guard.expect!r}): did the checks run?")
                if base_count is not None and (count is None or count < base_count):
                    return _done(verdict, t0, "incorrect",
                                 f"the guard's count fell from {base_count:g} to {count}: fewer checks ran")
        if mode == "full":
            samples: dict[str, list[float]] = {"baseline": [], "candidate": []}
            for r in range(n):
                for which in (("baseline", "candidate") if r % 2 == 0 else ("candidate", "baseline")):
                    beat()
                    result = run_fenced(spec.metric.command, base if which == "baseline" else cand, spec.timeout_s)
                    verdict.sandbox.update(result.fences)
                    if result.network_attempts and which == "candidate":
                        return _done(verdict, t0, "rejected", _offline(result.network_attempts, "the metric command"))
                    if result.network_attempts:
                        raise TaskBroken(f"task {spec.name}: its own files open network connections; a task's "
                                         "commands run offline (fetch what they need in its setup)")
                    if result.disk_exceeded and which == "candidate":
                        return _done(verdict, t0, "rejected", f"the metric command {_ended(result)} (run {r + 1} of {n})")
                    value = read_metric(spec.metric.read, result)
                    if which == "candidate":
                        verdict.log_tail = _tail(result.output)
                    if value is None and which == "baseline":
                        raise TaskBroken(f"task {spec.name}: its own files give no {spec.metric.read} figure "
                                         f"({_ended(result)}): "
                                         f"{_tail(result.output, 300)}")
                    if value is None:
                        why = (f"timed out after {spec.timeout_s:g} s" if result.timed_out
                               else f"exited {result.exit_code}" if not result.ok
                               else f"printed no {spec.metric.read[7:] if spec.metric.read.startswith('METRIC ') else 'figure'}")
                        return _done(verdict, t0, "timeout" if result.timed_out else "incorrect",
                                     f"the metric command {why} (run {r + 1} of {n})")
                    samples[which].append(value)
            agg = statistics.fmean if spec.metric.read == "failure_rate" else statistics.median
            metric.samples, metric.baseline_samples = samples["candidate"], samples["baseline"]
            metric.value, metric.baseline = agg(metric.samples), agg(metric.baseline_samples)
            metric.gain = round(gain(spec.metric.direction, spec.metric.read, metric.baseline, metric.value, n), 6)
            if spec.metric.read != "failure_rate" and overlap(metric.samples, metric.baseline_samples) and metric.gain != 1:
                verdict.flags.append(
                    f"within the noise: the candidate's runs ({min(metric.samples):.4g}-{max(metric.samples):.4g}) "
                    f"and the task's own ({min(metric.baseline_samples):.4g}-{max(metric.baseline_samples):.4g}) "
                    f"overlap, so the {metric.gain:.3g}x may be the machine's drift, not the change")
        changed = sorted(k for k, v in _fixed_digests(bundle, cand, allowed).items() if v != fixed.get(k))
        if changed:
            return _done(verdict, t0, "rejected",
                         f"running the candidate changed {', '.join(changed)}, which it may not edit")
    if mode != "full":
        return _done(verdict, t0, "ok", "the guard passed" if spec.guard else "nothing to check: the task has no guard")
    unit = f" {metric.unit}" if metric.unit else ""
    if spec.metric.read == "failure_rate":
        reason = (f"failure rate {metric.value:.3g} against {metric.baseline:.3g} for the task's own files "
                  f"over {n} runs each ({metric.gain:.3g}x)")
    else:
        reason = (f"{spec.metric.read}: {metric.value:.4g}{unit} against {metric.baseline:.4g}{unit} for the "
                  f"task's own files ({metric.gain:.3g}x), medians of {n} interleaved runs")
    return _done(verdict, t0, "ok", reason)


def _offline(attempts: int, what: str) -> str:
    return (f"the candidate opened a network connection while {what} ran ({attempts} attempt(s), each refused): "
            "a task's commands run offline")


def _done(verdict: Verdict, t0: float, status: str, reason: str) -> Verdict:
    verdict.status, verdict.reason = status, reason
    verdict.elapsed_s = round(time.monotonic() - t0, 3)
    return verdict
