"""Failures in words: the model endpoint's errors as short ApplicationErrors (no key, no chained cause), the
artifact store full (a quota) or damaged (its hash), and Fault's line. Fast, no server."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from types import SimpleNamespace

import openai
import pytest
from temporalio.exceptions import ApplicationError

from activities.artifacts import ArtifactCorrupt, ArtifactStore, ArtifactStoreFull, sha256_text
from activities.faults import MESSAGE_CHARS, application_error
from activities.model import map_error
from workflows.models import Fault

KEY = "sk-test-abcdef0123456789"


REQUEST = SimpleNamespace(method="POST", url="http://127.0.0.1:1/v1/chat/completions")


def _status_error(status: int, message: str, headers: dict | None = None) -> openai.APIStatusError:
    resp = SimpleNamespace(status_code=status, headers=headers or {}, request=REQUEST, reason_phrase="")
    return openai.APIStatusError(message, response=resp, body=None)


def test_connection_refused_names_the_os_reason():
    exc = openai.APIConnectionError(request=REQUEST)
    exc.__cause__ = ConnectionRefusedError(111, "Connection refused")  # what the transport raised
    err = map_error(exc)
    assert err.message == "model endpoint unreachable: connection refused" and not err.non_retryable


def test_auth_failure_is_final_and_never_shows_the_key():
    err = map_error(_status_error(401, f"Incorrect API key provided: {KEY}."), secret=KEY)
    assert err.type == "ModelAuthError" and err.non_retryable
    assert "HTTP 401" in err.message and KEY not in err.message and "***" in err.message


def test_context_length_and_retry_after_are_named():
    err = map_error(_status_error(400, "This model's maximum context length is 8192 tokens."))
    assert err.type == "ModelContextLength" and err.non_retryable and "context window" in err.message
    # llama.cpp's words (tests/serving/test_realmodel.py's server)
    err = map_error(_status_error(400, "request (9010 tokens) exceeds the available context size (8192 tokens), "
                                       "try increasing it"))
    assert err.type == "ModelContextLength" and err.non_retryable
    err = map_error(_status_error(429, "slow down " * 200, headers={"retry-after": "7"}))
    assert not err.non_retryable and err.next_retry_delay == timedelta(seconds=7)
    assert "HTTP 429" in err.message and "retry after 7 s" in err.message and len(err.message) < 500


def test_application_errors_are_clipped_and_unchained():
    try:
        try:
            raise ValueError("inner " * 1000)
        except ValueError as inner:
            raise ApplicationError("outer " * 1000, type="X") from inner
    except ApplicationError as exc:
        err = application_error(exc)
    assert len(err.message) <= MESSAGE_CHARS and err.type == "X" and err.__cause__ is None


def test_store_full_and_corrupt(tmp_path):
    store = ArtifactStore(tmp_path, quota_bytes=100)
    key = store.put("x" * 60)
    with pytest.raises(ArtifactStoreFull, match="is full"):
        store.put("y" * 60)
    assert application_error(ArtifactStoreFull(28, "full")).type == "ArtifactStoreFull"
    store.path(key).write_text("z" * 60)  # same size, other bytes
    with pytest.raises(ArtifactCorrupt, match="is corrupted"):
        store.get(key)
    err = application_error(ArtifactCorrupt("artifact is corrupted"))
    assert err.type == "ArtifactCorrupt" and err.non_retryable
    assert store.put("x" * 60) == key and store.get(key) == "x" * 60  # writing it again repairs it
    assert sha256_text(store.get(key)) == key


def test_fault_line_says_what_and_since_when():
    since = datetime(2026, 1, 1, tzinfo=timezone.utc)
    f = Fault(activity="agent_turn", attempt=7, message="model endpoint unreachable: connection refused", since=since)
    assert f.line(since + timedelta(seconds=96)) == (
        "model endpoint unreachable: connection refused for 96 s (agent_turn, 7 failed attempts); retrying")


def test_follow_line_says_what_fails_and_since_when():
    import asyncio
    import io

    from cli.run import _follow
    from workflows.models import RunStatus, TokenUsage

    since = datetime.now(timezone.utc) - timedelta(seconds=96)
    status = RunStatus(problem="mla_decode", policy="llm", phase="finished", step="turn 5: waiting for fake",
                       tool_calls=4, tool_calls_budget=10, turns=5, hours_used=0.1, hours_budget=1.0,
                       best_speedup=None, best_attempt=None, attempts=1, continue_as_new=0, compactions=0,
                       tokens=TokenUsage(), notebook=["agent_turn failing: model endpoint unreachable: connection "
                                                      "refused; retrying"],
                       fault=Fault(activity="agent_turn", attempt=7, since=since,
                                   message="model endpoint unreachable: connection refused"))

    class Handle:
        async def query(self, name, result_type=None):
            return status

    class Client:
        def get_workflow_handle(self, workflow_id):
            return Handle()

    out = io.StringIO()
    asyncio.run(_follow(Client(), "wf", out, asyncio.Event()))
    text = out.getvalue()
    assert "agent_turn failing: model endpoint unreachable: connection refused; retrying" in text
    assert re.search(r"failing: model endpoint unreachable: connection refused for 9[67] s "
                     r"\(agent_turn, 7 failed attempts\); retrying", text), text


def test_follow_says_what_a_refusing_server_answered(monkeypatch, capsys):
    """`marathon follow` against a server that refuses (not a missing run): the server's words, exit 2."""
    import argparse
    import asyncio

    from temporalio.service import RPCError, RPCStatusCode

    import worker
    from cli.run import _follow_async

    class Handle:
        async def describe(self):
            raise RPCError('message: "namespace is not allowed"', RPCStatusCode.PERMISSION_DENIED, b"")

    class Client:
        def get_workflow_handle(self, workflow_id):
            return Handle()

    async def connect(address, namespace="default"):
        return Client()

    monkeypatch.setattr(worker, "connect", connect)
    args = argparse.Namespace(address="host:7233", namespace="default", workflow_id="wf", server_wait=1.0,
                              json=False)
    assert asyncio.run(_follow_async(args)) == 2
    assert capsys.readouterr().err.strip() == \
        "marathon follow: the server at host:7233 answered: namespace is not allowed"
