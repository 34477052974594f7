"""Fence drills: a hostile candidate and a hostile problem file (kernels/evaluator/hostile_drills/) that
try every escape the sandboxes must refuse, as tests/kernels/evaluator/test_confinement.py and bench/gpu_confinement.py
run them on a host: their source with escape_attempts.py inlined and a run's values filled in, the
listeners they may not reach, and the searches for what they may have left behind. The drill files
are data, never imported."""
from __future__ import annotations

import ast
import os
import secrets
import shutil
import socket
import tempfile
import threading
from pathlib import Path

from kernels.evaluator import isolation

ROOT = Path(__file__).resolve().parents[2]
FENCES = Path(__file__).resolve().parent / "hostile_drills"
DENIED = ("canary file", "list /tmp", "project file", "write outside scratch", "write the project", "tcp connect",
          "abstract unix connect", "unix path connect", "unix datagram to a path", "shell via subprocess", "shell via posix_spawn", "detached shell", "python", "fork")


def hostile_source(name: str, values: dict[str, str]) -> str:
    """A hostile file of kernels/evaluator/hostile_drills with escape_attempts.py inlined (nothing under tests/ is
    readable inside the fences) and the test's values filled in."""
    helpers = (FENCES / "escape_attempts.py").read_text()
    lines = [helpers if line.startswith("from escape_attempts import") else line
             for line in (FENCES / f"{name}.py").read_text().splitlines()]
    source = "\n".join(lines) + "\n"
    for key, value in values.items():
        source = source.replace(f"@{key}@", value)
    return source


class Listeners:
    """A TCP listener on the host's loopback, an abstract unix socket, and a unix socket of a path
    under /tmp (a host service's, as docker.sock or D-Bus: open to all, answering every connection
    with `reply`), and a unix datagram socket of a path beside it: what the hostile code may not reach.
    Counts every connection and every datagram."""

    def __init__(self, reply: bytes = b"") -> None:
        self.reply = reply or ("marathon-host-service-" + secrets.token_hex(8)).encode()
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.abstract_name = "marathon-test-" + secrets.token_hex(6)
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind("\0" + self.abstract_name)
        self.folder = tempfile.mkdtemp(prefix="marathon-host-service-", dir="/tmp")
        os.chmod(self.folder, 0o755)
        self.unix_path = os.path.join(self.folder, "service.sock")
        self.path = socket.socket(socket.AF_UNIX)
        self.path.bind(self.unix_path)
        os.chmod(self.unix_path, 0o777)
        self.dgram_path = os.path.join(self.folder, "service.dgram")
        self.dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dgram.bind(self.dgram_path)
        os.chmod(self.dgram_path, 0o777)
        self.dgram.settimeout(0.2)
        self.accepted: list = []
        self.stop = threading.Event()
        self.threads = []
        for s in (self.tcp, self.unix, self.path):
            s.listen()
            s.settimeout(0.2)
            t = threading.Thread(target=self._accept, args=(s,), daemon=True)
            t.start()
            self.threads.append(t)
        t = threading.Thread(target=self._receive, daemon=True)
        t.start()
        self.threads.append(t)

    @property
    def port(self) -> int:
        return self.tcp.getsockname()[1]

    def _accept(self, s) -> None:
        while not self.stop.is_set():
            try:
                conn = s.accept()[0]
            except OSError:
                continue
            self.accepted.append(conn)
            try:
                conn.sendall(self.reply)
            except OSError:
                pass

    def _receive(self) -> None:
        while not self.stop.is_set():
            try:
                self.accepted.append(self.dgram.recv(4096))
            except OSError:
                continue

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        for s in (self.tcp, self.unix, self.path, self.dgram):
            s.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def running_with(marker: str) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(int(pid))
        except OSError:
            continue
    alive = isolation.parent_pids()  # zombies count as gone
    return [p for p in pids if p in alive]


def files_holding(roots: list[Path], needle: bytes) -> list[str]:
    hits = []
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                path = Path(folder) / name
                try:
                    if needle in path.read_bytes():
                        hits.append(str(path))
                except OSError:
                    continue
    return hits


def report_of(reason: str) -> dict:
    """The dict the hostile code raised, out of the verdict's reason."""
    start = reason.rindex("report: {") + len("report: ")
    depth = 0
    for i, ch in enumerate(reason[start:], start):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0:
            return ast.literal_eval(reason[start:i + 1])
    raise AssertionError(reason)


def escape_values(listeners: Listeners, canary_file: str, project_file: Path) -> dict[str, str]:
    """What the hostile files' placeholders become: where the canary is, where they may not write,
    what they may not reach, the marker of whatever they start, a pid to read (this process's), and a
    value the worker's environment holds, for the problem file's error."""
    return {"CANARY_FILE": canary_file, "LEAK_PATH": f"/tmp/marathon-leak-{secrets.token_hex(4)}",
            "PROJECT_FILE": str(project_file), "PORT": str(listeners.port), "ABSTRACT": listeners.abstract_name,
            "UNIX_PATH": listeners.unix_path, "DGRAM_PATH": listeners.dgram_path,
            "MARKER": "marathon-escape-" + secrets.token_hex(6), "PIDS": str(os.getpid()),
            "ECHO": "echo-" + secrets.token_hex(10)}
