"""Shared by the hostile files beside it (each embeds this text, as a module of its own would be
unreadable from inside the fences): every escape a process past the policy would try, each recorded
as what it got, or how it was refused."""
import os
import socket
import subprocess
import sys
import time

REPORT = {}


def attempt(name, fn):
    try:
        REPORT[name] = "GOT " + repr(fn())[:160]
    except BaseException as exc:  # noqa: BLE001 - every refusal is the finding
        REPORT[name] = f"denied ({type(exc).__name__}: {exc})"[:200]


def _read(path):
    with open(path, "rb") as f:
        return f.read(1 << 16)


def hunt_environ(extra_pids):
    """Every /proc/*/environ and cmdline it can open: listed, guessed, and the ones it was told of."""
    found, readable = {}, 0
    own = os.readlink("/proc/self")  # its pid as /proc counts it (in a PID namespace, not os.getpid())
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError as exc:
        found["listing"] = f"denied ({exc.strerror})"
        pids = []
    for pid in dict.fromkeys(pids + [str(p) for p in range(1, 3000)] + [str(p) for p in extra_pids]):
        for what in ("environ", "cmdline"):
            try:
                data = _read(f"/proc/{pid}/{what}")
            except OSError:
                continue
            if pid != own:
                readable += 1
            at = data.find(b"sk-marathon")
            if at >= 0:
                found[f"/proc/{pid}/{what}"] = data[at:at + 60].decode(errors="replace")
    found["others_readable"] = readable
    return found


def linger(marker):
    """A program it may be allowed to start (the C compiler), in a session of its own and with an empty
    environment (no trace of the sandbox's marker), whose own child (cc1) blocks for good on a FIFO
    nobody writes; the driver is then killed, so cc1 is an orphan outside the sandbox's process tree.
    It outlives the evaluation unless something holds it (a PID namespace)."""
    fifo = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"{marker}.c")
    os.mkfifo(fifo)
    p = subprocess.Popen(["gcc", "-x", "c", "-c", fifo, "-o", os.devnull], start_new_session=True,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": os.path.dirname(fifo)},
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # gcc has started cc1, which waits on the FIFO
    running = p.poll() is None
    p.kill()
    p.wait()
    return f"driver pid {p.pid}, was running: {running}, killed: its cc1 is an orphan"


def fork_once():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return pid


def abstract_connect(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect("\0" + name)
    return "connected"


def path_connect(path):
    """A host service on a unix socket of a path (docker.sock, D-Bus, systemd's): the network namespace
    does not hold it, Landlock does not govern connect(); only seccomp refuses the socket."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(path)
    return s.recv(200)


def datagram_to(path):
    """A datagram socket needs no connect(): a pair of them (socketpair) could sendto() any path."""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    except OSError:
        s = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0]
    return s.sendto(b"hello from the sandbox", path)


def escape_everything(canary_file, leak_path, project_file, port, abstract, marker, pids, unix_path="", dgram_path=""):
    REPORT["environ"] = hunt_environ(pids)
    attempt("canary file", lambda: _read(canary_file))
    attempt("list /tmp", lambda: os.listdir("/tmp"))
    attempt("project file", lambda: _read(project_file))
    attempt("write outside scratch", lambda: open(leak_path, "w").write("leaked"))
    attempt("write the project", lambda: open(project_file, "a").write("edited"))
    attempt("tcp connect", lambda: socket.create_connection(("127.0.0.1", port), timeout=3).getpeername())
    attempt("abstract unix connect", lambda: abstract_connect(abstract))
    attempt("unix path connect", lambda: path_connect(unix_path))
    attempt("unix datagram to a path", lambda: datagram_to(dgram_path))
    attempt("shell via subprocess", lambda: subprocess.run(["/bin/sh", "-c", "echo escaped"], capture_output=True).stdout)
    attempt("shell via posix_spawn", lambda: os.posix_spawn("/bin/sh", ["sh", "-c", f"sleep 600 # {marker}"], {}))
    attempt("detached shell", lambda: subprocess.Popen(["/bin/sh", "-c", f"sleep 600 # {marker}"],
                                                       start_new_session=True).pid)
    attempt("python", lambda: subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True).stdout)
    attempt("fork", fork_once)
    attempt("detached compiler", lambda: linger(marker))
    return REPORT
