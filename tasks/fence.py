"""One task command, fenced: the same kind of confinement as a candidate kernel, for a shell command
that may start processes of its own (a test runner, a bundler).

    run_fenced("python -m pytest -q", workdir, timeout_s=60) -> CommandResult

A launcher process (`python -m tasks.fence`, started here) makes a PID namespace (and, as root, a
network namespace with no interface up, and a mount namespace with its own /proc), forks the
command's shell as PID 1 of it, and times it. When that shell ends, or the launcher dies, or the
time is up, the kernel ends every process left in the namespace: nothing the command starts
outlives it, setsid or not. In the namespace the command has: no network (unless `network`, for a
task's one-time setup), no capabilities, writes only beneath its working directory (Landlock), an
environment of allowlisted variables with HOME and TMPDIR in the working directory, and none of the
worker's secrets, and reads of the system's programs and libraries, this Python and its working
directory only (not /tmp, the home folders or other projects). Where the kernel lacks a feature the
result says which fence is missing."""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernels.evaluator import confinement, isolation

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x4000, 1 << 18, 2, 4, 8
OUTPUT_CAP = 256 * 1024  # bytes of a command's output kept (its tail)
ENV_NAMES = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM")
ENV_PREFIXES = ("LC_",)
SYSTEM_READABLE = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/dev",
                   "/run/systemd/resolve")


@dataclass
class CommandResult:
    exit_code: int | None  # None: killed at the time limit
    wall_s: float  # the command's own time, from its start in the namespace to its end
    output: str  # stdout and stderr together, the tail past OUTPUT_CAP
    timed_out: bool = False
    fences: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def task_env(workdir: Path, source: dict[str, str] | None = None) -> dict[str, str]:
    source = dict(os.environ if source is None else source)
    env = {k: v for k, v in source.items()
           if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and not confinement.looks_secret(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    # the Python that runs the worker (a virtualenv's bin first), so `python` means the same thing
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    tmp = workdir / ".tmp"
    tmp.mkdir(exist_ok=True)
    env.update({"HOME": str(workdir), "TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONNOUSERSITE": "1", "npm_config_cache": str(workdir / ".npm"),
                "npm_config_update_notifier": "false"})
    return env


def run_fenced(command: str, workdir: Path, timeout_s: float, network: bool = False,
               env: dict[str, str] | None = None) -> CommandResult:
    """Run `command` with /bin/sh in `workdir`, fenced; never raises for what the command does."""
    workdir = Path(workdir).resolve()
    env = task_env(workdir) if env is None else env
    read_fd, write_fd = os.pipe()
    args = [sys.executable, "-m", "tasks.fence", str(write_fd), str(workdir), "1" if network else "0",
            repr(float(timeout_s)), command]
    launcher_env = {"PATH": env.get("PATH", ""), "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
                    "TASK_ENV": json.dumps(env)}
    t0 = time.monotonic()
    proc = subprocess.Popen(args, cwd=workdir, env=launcher_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True,
                            preexec_fn=confinement.die_with_parent())
    os.close(write_fd)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout_s + 5.0)  # the launcher enforces timeout_s itself
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)  # its PID 1 follows (parent-death signal), and the namespace with it
        out, _ = proc.communicate()
    with os.fdopen(read_fd) as f:
        report = f.read()
    try:
        facts = json.loads(report) if report else {}
    except ValueError:
        facts = {}
    text = out.decode(errors="replace") if out else ""
    if len(text) > OUTPUT_CAP:
        text = "[... earlier output cut ...]\n" + text[-OUTPUT_CAP:]
    timed_out = timed_out or bool(facts.get("timed_out"))
    return CommandResult(exit_code=None if timed_out else facts.get("exit_code", proc.returncode),
                         wall_s=float(facts.get("wall_s", time.monotonic() - t0)), output=text,
                         timed_out=timed_out, fences=facts.get("fences", {}))


def readable_paths() -> list[str]:
    """What a task's commands may read besides their working directory: the system's programs,
    libraries and settings, this Python (a virtualenv and the interpreter it was made from), and the
    devices; not the home folders, /tmp, /work or any other project."""
    paths = list(SYSTEM_READABLE)
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}:
        if p and os.path.isdir(p):
            paths.append(p)
    return paths


# --- the launcher (python -m tasks.fence FD WORKDIR NETWORK COMMAND) ---------------------------------
def _unshare(flags: int) -> bool:
    return isolation.libc().unshare(flags) == 0


def _private_proc() -> bool:
    """In the new mount namespace: mounts stay private, and /proc shows this PID namespace only."""
    lc = isolation.libc()
    lc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if lc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    return lc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0


def _child(workdir: str, command: str, env: dict[str, str], mount_ns: bool, network: bool, fences_fd: int) -> None:
    """PID 1 of the namespace: the fences that need no namespace, then exec the shell. What took is
    written to `fences_fd`, which closes on exec."""
    isolation.set_parent_death_signal(signal.SIGKILL)
    fences: dict[str, bool] = {}
    if mount_ns:
        fences["private_proc"] = _private_proc()
    fences["landlock"] = isolation.restrict_filesystem([workdir, "/dev/null", "/dev/tty"], readable=readable_paths(),
                                                       tcp=network) > 0
    if os.geteuid() == 0:
        fences["capabilities_dropped"] = isolation.drop_capabilities()
    os.write(fences_fd, json.dumps(fences).encode())
    os.chdir(workdir)
    os.execve("/bin/sh", ["sh", "-c", command], env)


def main(argv: list[str]) -> int:
    report_fd, workdir, network, timeout_s, command = int(argv[0]), argv[1], argv[2] == "1", float(argv[3]), argv[4]
    env = json.loads(os.environ.get("TASK_ENV", "{}"))
    fences: dict[str, bool] = {}
    root = os.geteuid() == 0
    fences["pid_namespace"] = _unshare(CLONE_NEWPID | (CLONE_NEWNS if root else 0))
    fences["mount_namespace"] = fences["pid_namespace"] and root
    if not network:
        fences["network_namespace"] = root and _unshare(CLONE_NEWNET)
    fences_r, fences_w = os.pipe2(os.O_CLOEXEC)
    timed_out = []

    def time_up(signum, frame) -> None:
        timed_out.append(True)
        os.kill(pid, signal.SIGKILL)  # PID 1 gone: the kernel kills the rest of the namespace

    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(report_fd)
            os.close(fences_r)
            _child(workdir, command, env, fences["mount_namespace"], network, fences_w)
        finally:
            os._exit(127)
    os.close(fences_w)
    signal.signal(signal.SIGALRM, time_up)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    _, status = os.waitpid(pid, 0)  # retried by Python after the alarm's handler
    wall = time.monotonic() - t0
    signal.setitimer(signal.ITIMER_REAL, 0)
    with os.fdopen(fences_r) as f:
        try:
            fences.update(json.loads(f.read() or "{}"))
        except ValueError:
            pass
    code = None if timed_out else os.waitstatus_to_exitcode(status)
    with os.fdopen(report_fd, "w") as f:
        json.dump({"exit_code": code, "wall_s": wall, "timed_out": bool(timed_out), "fences": fences}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
