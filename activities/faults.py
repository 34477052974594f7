"""How an activity fails in a way people can read, and how it keeps Temporal informed while it runs.

- `application_error`: any exception as a short ApplicationError: one line, capped (Temporal replaces a
  failure over its size limit by "Failure exceeds size limit."), no chained cause (its stack trace is
  what overflows), artifact-store faults named plainly (full: retried; corrupted: not).
- `heartbeating`: a thread that heartbeats while a blocking call runs, so that an attempt lost with its
  worker is retried after the heartbeat timeout rather than after the start-to-close timeout.
- `FaultReporter`: after a failed attempt that Temporal will retry, a signal to the workflow (a Fault),
  so that its progress line, notebook and Web UI details say what is failing and since when."""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from typing import Iterator

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.artifacts import ArtifactCorrupt, ArtifactStoreFull
from compaction.text import one_line
from workflows import names
from workflows.models import Fault

MESSAGE_CHARS = 1000  # of a failure's message; with its stack trace well under Temporal's 4 KB limit
SIGNAL_TIMEOUT_S = 5.0


def application_error(exc: BaseException) -> ApplicationError:
    if isinstance(exc, ApplicationError):
        if len(exc.message) <= MESSAGE_CHARS and exc.__cause__ is None:
            return exc
        return ApplicationError(one_line(exc.message, MESSAGE_CHARS), *exc.details, type=exc.type,
                                non_retryable=exc.non_retryable, next_retry_delay=exc.next_retry_delay,
                                category=exc.category)
    if isinstance(exc, ArtifactStoreFull):
        return ApplicationError(one_line(exc.strerror or str(exc), MESSAGE_CHARS), type="ArtifactStoreFull")
    if isinstance(exc, ArtifactCorrupt):
        return ApplicationError(one_line(str(exc), MESSAGE_CHARS), type="ArtifactCorrupt", non_retryable=True)
    return ApplicationError(one_line(f"{type(exc).__name__}: {exc}", MESSAGE_CHARS), type=type(exc).__name__)


@contextlib.contextmanager
def heartbeating(interval_s: float = 1.0) -> Iterator[None]:
    """Heartbeat every `interval_s` from a side thread (the SDK throttles what it sends to the server)."""
    if activity.info().is_local:
        yield
        return
    ctx = contextvars.copy_context()
    done = threading.Event()

    def beat() -> None:
        while not done.wait(interval_s):
            try:
                ctx.run(activity.heartbeat)
            except Exception:  # the activity is finishing; nothing to tell
                return

    thread = threading.Thread(target=beat, name="marathon-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=interval_s + 1)


class FaultReporter:
    """Sends a Fault to the workflow of a failing activity, from the activity's worker thread, through the
    worker's client on the worker's event loop. Best effort: a server that is down hears nothing."""

    def __init__(self, client: Client | None, loop: asyncio.AbstractEventLoop | None) -> None:
        self.client, self.loop = client, loop

    def report(self, err: ApplicationError) -> None:
        if self.client is None or self.loop is None or err.non_retryable:
            return
        info = activity.info()
        if info.is_local or not info.workflow_id:
            return
        fault = Fault(activity=info.activity_type, attempt=info.attempt, message=one_line(err.message, 300),
                      since=info.scheduled_time)
        handle = self.client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        try:
            asyncio.run_coroutine_threadsafe(handle.signal(names.FAULT_SIGNAL, fault), self.loop).result(
                timeout=SIGNAL_TIMEOUT_S)
        except Exception:
            pass
