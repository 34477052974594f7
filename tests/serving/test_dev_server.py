"""The dev server as a child process: a port it picked that another process took meanwhile is not a
failure (the server is started again on a fresh one); a port the user gave is never swapped."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from serving import dev_server
from serving.dev_server import DevServer, PortTaken


@pytest.fixture
def held_port():
    with socket.socket() as s:  # a listener, as another process's server would be
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_picked_port_taken_meanwhile_is_picked_again(held_port, monkeypatch, tmp_path):
    picks = iter([held_port])
    real = dev_server.free_port
    monkeypatch.setattr(dev_server, "free_port", lambda: next(picks, None) or real())
    srv = DevServer(log=tmp_path / "temporal.log")
    assert srv.port == held_port
    with srv:
        assert srv.port != held_port and srv.proc is not None and srv.proc.poll() is None
    assert "address already in use" in (tmp_path / "temporal.log").read_text()


def test_a_given_port_that_is_taken_fails_at_once(held_port, tmp_path):
    with pytest.raises(PortTaken, match=f"port {held_port} was taken"):
        DevServer(port=held_port, log=tmp_path / "temporal.log").start()


def test_a_web_ui_port_that_is_taken_fails_the_start_not_the_run_later(held_port, tmp_path):
    """The UI binds its port after the frontend answers, and a UI port taken ends the whole server: the
    start waits for the UI too, so it fails there, saying so, rather than leaving a server that dies."""
    with pytest.raises(PortTaken, match=f"Web UI's {held_port} was taken"):
        DevServer(ui_port=held_port, log=tmp_path / "temporal.log").start()


def test_marathon_dev_says_a_taken_port_in_one_line(held_port, tmp_path):
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "marathon.py", "dev", "--port", str(dev_server.free_port()), "--ui-port",
                          str(held_port), "--state-dir", str(tmp_path)], cwd=root, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert f"Web UI's {held_port} was taken" in out.stderr
