"""The local state directory: where `marathon dev` and embedded `marathon run`s keep their Temporal
databases, and how a later command reads them back.

    STATE/temporal.db            `marathon dev`'s server
    STATE/runs/<id>/temporal.db  one embedded `marathon run` (its own database: two embedded runs at once
                                 never share a server, and a run's folder can be carried to another host)
    STATE/reports/<id>/          `marathon report`'s default output folder

A database is served by at most one server at a time: the process serving it holds an exclusive lock on
`<db>.lock` and writes its address there. A reader that finds the lock held connects to that address;
otherwise it starts a headless dev server on the database for as long as it reads."""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

DEV_DB = "temporal.db"
RUNS = "runs"
REPORTS = "reports"


def state_dir(path: str | os.PathLike | None = None) -> Path:
    """The state directory: `path`, or $XDG_STATE_HOME/kernel-marathon (~/.local/state/kernel-marathon)."""
    if path:
        return Path(path).expanduser()
    base = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state"))
    return base / "kernel-marathon"


def safe_name(workflow_id: str) -> str:
    """A workflow id as one path component."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in workflow_id).lstrip(".") or "_"


def run_db(state: Path, workflow_id: str) -> Path:
    return state / RUNS / safe_name(workflow_id) / DEV_DB


def report_dir(state: Path, workflow_id: str) -> Path:
    return state / REPORTS / safe_name(workflow_id)


def databases(state: Path) -> list[Path]:
    """Every Temporal database under the state directory: `marathon dev`'s and each embedded run's."""
    found = [state / DEV_DB] if (state / DEV_DB).is_file() else []
    return found + sorted((state / RUNS).glob(f"*/{DEV_DB}"))


class DatabaseLock:
    """The exclusive claim to serve one database. `address` records where it is served."""

    def __init__(self, db: Path) -> None:
        self.path = Path(str(db) + ".lock")
        self.fd: int | None = None

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)  # a dead holder's address is stale
        self.fd = fd
        return True

    def publish(self, address: str) -> None:
        assert self.fd is not None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, address.encode(), 0)

    def holder_address(self) -> str | None:
        """The address the lock's holder serves the database on (None: nobody holds it, or not yet)."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return text or None

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = None


@contextlib.contextmanager
def serving(db: Path) -> Iterator[DatabaseLock]:
    """Hold the claim to serve `db` (for `marathon dev` and embedded runs); ValueError when another
    process serves it already."""
    lock = DatabaseLock(db)
    if not lock.try_acquire():
        where = lock.holder_address()
        raise ValueError(f"{db} is served already" + (f" (on {where})" if where else "") + " by another process")
    try:
        yield lock
    finally:
        lock.release()


@contextlib.contextmanager
def embedded_server(state: Path, workflow_id: str):
    """The dev server of an embedded run (or suite) `workflow_id`: its own database under `state`,
    claimed for as long as it runs, so that `marathon runs` and `report` find it, live or later.
    ValueError when another process serves that database already."""
    from serving.dev_server import DevServer

    db = run_db(state, workflow_id)
    with serving(db) as lock, DevServer(db=db, log=db.parent / "temporal.log") as server:
        lock.publish(server.address)
        yield server


@contextlib.contextmanager
def reading(db: Path) -> Iterator[str]:
    """An address that serves `db`: its live server's, or a headless dev server's started for the read."""
    from serving.dev_server import DevServer

    lock = DatabaseLock(db)
    if not lock.try_acquire():
        where = lock.holder_address()
        if where is None:
            raise ValueError(f"{db} is held by another process that serves it nowhere yet; try again shortly")
        yield where
        return
    try:
        server = DevServer(db=db, log=db.parent / "temporal-read.log")
        with server:
            lock.publish(server.address)
            yield server.address
    finally:
        lock.release()
