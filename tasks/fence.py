"""One task command, fenced: the same kind of confinement as a candidate kernel, for a shell command
that may start processes of its own (a test runner, a bundler).

    run_fenced("python -m pytest -q", workdir, timeout_s=60) -> CommandResult

A launcher process (`python -m tasks.fence`, started here) makes a PID namespace (as root, or inside a
user namespace of its own without root), with a mount namespace and its own /proc, and a network
namespace with no interface up; forks the command's shell as PID 1 of it, and times it. When that
shell ends, or the launcher dies, or the time is up, the kernel ends every process left in the
namespace: nothing the command starts outlives it, setsid or not. Where no PID namespace can be made,
the launcher is the command's subreaper and ends what it left. In the namespace the command has: no
network (unless `network`, for a task's one-time setup), no capabilities, writes only beneath its
working directory (Landlock) and there no more than a quota (weighed every second; past it the
command is killed), an environment of allowlisted variables with HOME and TMPDIR in the working
directory and none of the worker's secrets, and reads of the system's programs and libraries, this
Python and its working directory only (not /tmp, the home folders or other projects). Where the
kernel lacks a feature the result says which fence is missing."""
from __future__ import annotations

import ctypes
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernels.evaluator import confinement, isolation
from kernels.settings import settings

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
    disk_exceeded: bool = False  # killed for writing more than its quota beneath its working directory
    fences: dict[str, bool | int | str] = field(default_factory=dict)
    network_attempts: int = 0  # sockets to a network the command tried to open (each refused)

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
               env: dict[str, str] | None = None, disk_quota: int | None = None,
               file_quota: int = isolation.MAX_FILES) -> CommandResult:
    """Run `command` with /bin/sh in `workdir`, fenced; never raises for what the command does. It may
    add `disk_quota` bytes (default: the sandboxes' MARATHON_SANDBOX_DISK) and `file_quota` files to
    what `workdir` holds."""
    workdir = Path(workdir).resolve()
    env = task_env(workdir) if env is None else env
    read_fd, write_fd = os.pipe()
    switches = settings()
    quota = switches.sandbox_disk if disk_quota is None else disk_quota
    args = [sys.executable, "-m", "tasks.fence", str(write_fd), str(workdir), "1" if network else "0",
            repr(float(timeout_s)), "1" if switches.sandbox_pidns else "0", "1" if switches.sandbox_subreaper else "0",
            str(int(quota)), str(int(file_quota)), command]
    launcher_env = {"PATH": env.get("PATH", ""), "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
                    "TASK_ENV": json.dumps(env)}
    t0 = time.monotonic()
    proc = subprocess.Popen(args, cwd=workdir, env=launcher_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True,
                            preexec_fn=confinement.die_with_parent())
    os.close(write_fd)
    deadline = time.monotonic() + timeout_s + 5.0  # the launcher enforces timeout_s itself
    out, cut, timed_out = _output_tail(proc, deadline)
    if not timed_out:  # the output ended: the launcher exits with its command
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.0) + 5.0)
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        os.killpg(proc.pid, signal.SIGKILL)  # its PID 1 follows (parent-death signal), and the namespace with it
        # (a process past every fence may still hold the output's pipe: its output is read 5 s more at most)
        more, more_cut, _ = _output_tail(proc, time.monotonic() + 5.0)
        out, cut = (out + more)[-OUTPUT_CAP:], cut or more_cut or len(out) + len(more) > OUTPUT_CAP
    proc.stdout.close()
    proc.wait()
    with os.fdopen(read_fd) as f:
        report = f.read()
    try:
        facts = json.loads(report) if report else {}
    except ValueError:
        facts = {}
    text = out.decode(errors="replace")
    if cut:
        text = "[... earlier output cut ...]\n" + text
    timed_out = timed_out or bool(facts.get("timed_out"))
    return CommandResult(exit_code=None if timed_out else facts.get("exit_code", proc.returncode),
                         wall_s=float(facts.get("wall_s", time.monotonic() - t0)), output=text,
                         timed_out=timed_out, disk_exceeded=bool(facts.get("disk_exceeded")), fences=facts.get("fences", {}),
                         network_attempts=int(facts.get("network_attempts", 0)))


def _output_tail(proc: subprocess.Popen, deadline: float) -> tuple[bytes, bool, bool]:
    """The command's output read as it comes until it ends or `deadline` (a monotonic time) passes,
    keeping only its last OUTPUT_CAP bytes: a command that prints gigabytes holds no more of the
    worker's memory than that. (tail, whether earlier output was cut, whether the deadline came first.)"""
    fd = proc.stdout.fileno()
    tail, cut = bytearray(), False
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(tail[-OUTPUT_CAP:]), cut or len(tail) > OUTPUT_CAP, True
            if not sel.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return bytes(tail[-OUTPUT_CAP:]), cut or len(tail) > OUTPUT_CAP, False
            tail += chunk
            if len(tail) > 2 * OUTPUT_CAP:
                del tail[:-OUTPUT_CAP]
                cut = True


def readable_paths() -> list[str]:
    """What a task's commands may read besides their working directory: the system's programs,
    libraries and settings, this Python (a virtualenv and the interpreter it was made from), and the
    devices; not the home folders, /tmp, /work or any other project."""
    paths = list(SYSTEM_READABLE)
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}:
        if p and os.path.isdir(p):
            paths.append(p)
    return paths


# --- the command's sockets: a seccomp filter that refuses Unix sockets of a path, and passes its
# socket(AF_INET/AF_INET6) calls to the launcher to answer --
# A Unix socket of a path reaches the host's services (docker.sock, D-Bus, systemd's) through the file
# system, which neither the network namespace nor Landlock holds: socket(AF_UNIX) is refused (EPERM),
# and socketpair() is left only for connected streams (a datagram socket could sendto() any path). Other
# ABIs (i386's int 0x80, x32, arm32) may not make sockets at all. The command's processes cannot reach a
# network anyway (their namespace has none); the launcher also counts their attempts, so that a
# candidate that tries is rejected, not merely failed.
# arch, socket, seccomp, socketpair, (foreign ABI, its socket calls: socketcall, socket, socketpair)
_SECCOMP_NR = {"x86_64": (0xC000003E, 41, 317, 53, (0x40000003, (102, 359, 360))),
               "aarch64": (0xC00000B7, 198, 277, 199, (0x40000028, (281, 288)))}
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 1, 1 << 3
RET_ALLOW, RET_USER_NOTIF, RET_EPERM = 0x7FFF0000, 0x7FC00000, 0x00050001
NOTIF_RECV, NOTIF_SEND = 0xC0502100, 0xC0182101  # SECCOMP_IOCTL_NOTIF_{RECV,SEND}
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10


def _socket_program(watch: bool) -> bytes | None:
    """The filter: no Unix socket but a stream pair; with `watch`, socket(AF_INET/AF_INET6) goes to the
    launcher (a user notification). None on an architecture it does not know."""
    import platform
    arch = _SECCOMP_NR.get(platform.machine())
    if arch is None:
        return None
    audit, nr_socket, _, nr_pair, (foreign, foreign_sockets) = arch
    prog: list = [("ld", 4), ("jeq", audit, "native", None), ("jeq", foreign, None, "allow"), ("ld", 0)]
    prog += [("jeq", nr, "eperm", None) for nr in foreign_sockets]
    prog += [("ret", RET_ALLOW),
             "native", ("ld", 0)]
    if platform.machine() == "x86_64":
        prog.append(("jge", 0x40000000, "eperm", None))  # the x32 ABI
    prog += [("jeq", nr_socket, "socket", None), ("jeq", nr_pair, "socketpair", "allow"),
             "socket", ("ld", 16), ("jeq", AF_UNIX, "eperm", None)]
    if watch:
        prog += [("jeq", AF_INET, "notify", None), ("jeq", AF_INET6, "notify", None)]
    prog += [("ret", RET_ALLOW),
             "socketpair", ("ld", 16), ("jeq", AF_UNIX, None, "allow"),
             ("ld", 24), ("and", 0xF), ("jeq", 1, "allow", None), ("jeq", 5, "allow", "eperm"),  # stream, seqpacket
             "allow", ("ret", RET_ALLOW),
             "eperm", ("ret", RET_EPERM),
             "notify", ("ret", RET_USER_NOTIF)]
    return isolation.assemble_bpf(prog)


def _socket_filter(watch: bool) -> tuple[bool, int | None]:
    """Install the filter (after no_new_privs): whether it took, and with `watch` its listener's fd."""
    import platform
    prog = _socket_program(watch)
    if prog is None:
        return False, None
    buf = ctypes.create_string_buffer(prog, len(prog))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    lc = isolation.libc()
    lc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    fd = lc.syscall(_SECCOMP_NR[platform.machine()][2], ctypes.c_uint(SECCOMP_SET_MODE_FILTER),
                    ctypes.c_uint(SECCOMP_FILTER_FLAG_NEW_LISTENER if watch else 0), ctypes.byref(fprog))
    if fd < 0:  # no user notifications here (Linux < 5.0): Unix sockets refused all the same
        return _socket_filter(False) if watch else (False, None)
    return True, (fd if watch else None)


def _answer_network_attempt(fd: int, attempts: list[int]) -> None:
    """The launcher's side: one attempt counted and refused (EACCES)."""
    import errno
    import fcntl
    import struct
    buf = bytearray(80)  # struct seccomp_notif
    try:
        fcntl.ioctl(fd, NOTIF_RECV, buf, True)
    except OSError:
        return
    attempts.append(struct.unpack_from("I", buf, 8)[0])
    try:  # struct seccomp_notif_resp: id, val, error, flags
        fcntl.ioctl(fd, NOTIF_SEND, bytearray(struct.pack("QqiI", struct.unpack_from("Q", buf, 0)[0], 0,
                                                           -errno.EACCES, 0)), True)
    except OSError:
        pass


DISK_POLL_S = 1.0  # how often the launcher weighs what the command wrote


def _wait(pid: int, listener: int | None, attempts: list[int], over_quota) -> int:
    """The command's exit status, answering its network attempts meanwhile and killing it once
    `over_quota()` says it wrote too much. No thread: a process that made a PID namespace for its
    children may not start one (so: poll on a pidfd and the listener)."""
    import select
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    if listener is not None:
        poller.register(listener, select.POLLIN)
    try:
        while True:
            events = poller.poll(int(DISK_POLL_S * 1000))
            if not events and over_quota():
                os.kill(pid, signal.SIGKILL)  # PID 1 gone: the kernel kills the rest of the namespace
            for fd, event in events:
                if fd == pidfd:
                    return os.waitpid(pid, 0)[1]
                if event & select.POLLIN:
                    _answer_network_attempt(listener, attempts)
                elif event & (select.POLLHUP | select.POLLERR):
                    poller.unregister(listener)
    finally:
        os.close(pidfd)


# --- the launcher (python -m tasks.fence FD WORKDIR NETWORK TIMEOUT PIDNS SUBREAPER QUOTA FILES COMMAND)
def _unshare(flags: int) -> bool:
    return isolation.libc().unshare(flags) == 0


def _namespaces(pid_namespace: bool, network: bool) -> dict[str, bool | str]:
    """The launcher's namespaces, which its next child enters: a PID namespace with a mount namespace
    (isolation.unshare_pid_namespace), and a network namespace unless the command may use the network."""
    how, mounts = isolation.unshare_pid_namespace() if pid_namespace else ("", False)
    facts: dict[str, bool | str] = {"pid_namespace": bool(how), "mount_namespace": mounts, "namespaces_as": how}
    if not network:
        facts["network_namespace"] = (bool(how) or os.geteuid() == 0) and _unshare(isolation.CLONE_NEWNET)
    return facts


def _child(workdir: str, command: str, env: dict[str, str], mount_ns: bool, user_namespace: bool, network: bool,
           fences_fd: int, listener_sock) -> None:
    """PID 1 of the namespace: the fences that need no namespace, then exec the shell. What took is
    written to `fences_fd`, which closes on exec."""
    isolation.set_parent_death_signal(signal.SIGKILL)
    fences: dict[str, bool] = {}
    if mount_ns:
        fences["private_proc"] = isolation.private_mounts(dev_shm=False)[1]
    fences["landlock"] = isolation.restrict_filesystem([workdir, "/dev/null", "/dev/tty"], readable=readable_paths(),
                                                       tcp=network) > 0
    if os.geteuid() == 0 or user_namespace:  # root's, or those its own user namespace gives: all of them go
        fences["capabilities_dropped"] = isolation.drop_capabilities()
    took, listener = _socket_filter(watch=not network)  # (setup may use the network: nothing to count there)
    fences["unix_sockets_refused"] = took
    if not network:
        fences["network_watch"] = listener is not None
        import socket
        socket.send_fds(listener_sock, [b"x"], [listener] if listener is not None else [])
        if listener is not None:
            os.close(listener)
    listener_sock.close()
    os.write(fences_fd, json.dumps(fences).encode())
    os.chdir(workdir)
    os.execve("/bin/sh", ["sh", "-c", command], env)


def main(argv: list[str]) -> int:
    report_fd, workdir, network, timeout_s = int(argv[0]), argv[1], argv[2] == "1", float(argv[3])
    pid_namespace, subreaper, quota, file_quota = argv[4] == "1", argv[5] == "1", int(argv[6]), int(argv[7])
    command = argv[8]
    held, files = isolation.disk_usage(workdir, cap=1 << 40)  # what the folder held before; the quotas on top
    allowed, allowed_files = held + quota, files + file_quota
    disk_exceeded = []

    def over_quota() -> bool:
        used, count = isolation.disk_usage(workdir, cap=allowed_files)
        if used > allowed or count > allowed_files:
            disk_exceeded.append(True)
        return bool(disk_exceeded)

    env = json.loads(os.environ.get("TASK_ENV", "{}"))
    fences: dict = {"subreaper": subreaper and isolation.become_subreaper()}
    fences.update(_namespaces(pid_namespace, network))
    fences_r, fences_w = os.pipe2(os.O_CLOEXEC)
    import socket
    parent_sock, child_sock = socket.socketpair()  # the filter's listener comes back through it
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
            parent_sock.close()
            _child(workdir, command, env, fences["mount_namespace"], fences["namespaces_as"] == "user namespace",
                   network, fences_w, child_sock)
        finally:
            os._exit(127)
    os.close(fences_w)
    child_sock.close()
    attempts: list[int] = []
    listener = None
    if not network:
        try:
            _, fds, _, _ = socket.recv_fds(parent_sock, 1, 1)
        except OSError:
            fds = []
        listener = fds[0] if fds else None
    parent_sock.close()
    signal.signal(signal.SIGALRM, time_up)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    status = _wait(pid, listener, attempts, over_quota)  # retried by Python after the alarm's handler
    wall = time.monotonic() - t0
    signal.setitimer(signal.ITIMER_REAL, 0)
    if fences["subreaper"]:  # without a PID namespace, what the command left came here: the launcher runs
        # nothing but the command, so every child of its left is such an orphan, in its session or not
        fences["orphans_ended"] = isolation.end_adopted({pid}, any_session=True)
    over_quota()  # weighed once more when all is over: a command shorter than a poll was never weighed
    if listener is not None:
        os.close(listener)
    with os.fdopen(fences_r) as f:
        try:
            fences.update(json.loads(f.read() or "{}"))
        except ValueError:
            pass
    code = None if timed_out or disk_exceeded else os.waitstatus_to_exitcode(status)
    with os.fdopen(report_fd, "w") as f:
        json.dump({"exit_code": code, "wall_s": wall, "timed_out": bool(timed_out), "fences": fences,
                   "disk_exceeded": bool(disk_exceeded),
                   "network_attempts": len(attempts)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
