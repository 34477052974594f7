"""Talking to a Temporal server that may be down or restarting: its error in a few words, and a call
retried while the server does not answer."""
from __future__ import annotations

import sys


class ServerGone(Exception):
    """The Temporal server did not answer within the time we wait for it."""


def why(exc: BaseException) -> str:
    """A connection error in a few words: the OS's reason where the SDK's text holds one."""
    import re
    text = str(exc).strip()
    found = re.search(r'message: "([^"]+)"', text)
    if found:
        return found.group(1)
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def server_down(exc: BaseException) -> bool:
    from temporalio.service import RPCError, RPCStatusCode
    if isinstance(exc, RPCError):
        return exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNKNOWN,
                              RPCStatusCode.CANCELLED)
    return isinstance(exc, RuntimeError) and str(exc).startswith("Failed client connect")


def refusal(exc: BaseException, address: str | None = None) -> str | None:
    """A Temporal error at the CLI's boundary in one line: the server refusing the request (a bad
    argument, a missing or existing id, no permission), or not answering; None for anything else."""
    if not type(exc).__module__.startswith("temporalio") and not isinstance(exc, RuntimeError):
        return None
    from temporalio.service import RPCError, RPCStatusCode
    at = f" at {address}" if address else ""
    if server_down(exc):
        return f"cannot reach the Temporal server{at}: {why(exc)}"
    if isinstance(exc, RPCError) and exc.status in (
            RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.NOT_FOUND, RPCStatusCode.ALREADY_EXISTS,
            RPCStatusCode.FAILED_PRECONDITION, RPCStatusCode.OUT_OF_RANGE, RPCStatusCode.PERMISSION_DENIED,
            RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNIMPLEMENTED):
        return f"the server{at} refused the request ({exc.status.name.lower()}): {why(exc)}"
    return None


async def while_server_up(call, address: str, wait_s: float, command: str):
    """`await call()`, and while the server does not answer (down, or restarting), say so once and try
    again, for up to `wait_s` seconds; then ServerGone."""
    import asyncio
    import time
    down_since = None
    while True:
        try:
            result = await call()
        except Exception as exc:
            if not server_down(exc):
                if down_since is not None:
                    print(f"marathon {command}: the server at {address} is answering again", file=sys.stderr,
                          flush=True)
                raise
            now = time.monotonic()
            if down_since is None:
                down_since = now
                print(f"marathon {command}: the server at {address} is not answering ({why(exc)}); waiting up to "
                      f"{wait_s:g} s for it (--server-wait)", file=sys.stderr, flush=True)
            elif now - down_since > wait_s:
                raise ServerGone(f"the server at {address} did not answer for {wait_s:g} s ({why(exc)}); "
                                 f"the run, if it exists, goes on without us") from None
            await asyncio.sleep(1.0)
            continue
        if down_since is not None:
            print(f"marathon {command}: the server at {address} is answering again", file=sys.stderr, flush=True)
        return result
