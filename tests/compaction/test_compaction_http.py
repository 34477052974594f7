"""The compact activity through the real model call (activities.model.chat_completion, the openai
package) against a local OpenAI-compatible HTTP server: the schema goes out as response_format, a
valid answer is used, an HTTP error or garbage falls back, and an endpoint that refuses json_schema
is asked again without it."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from activities.compaction import CompactInput, compact_memory
from compaction.memory import AttemptDigest, BestKernel, Goal, Memory
from workflows.models import ModelSettings

ANSWER = {"strategies": [{"hypothesis": "split KV over 8 programs", "change": "", "effect": "40 us",
                          "verdict": "kept", "attempt": 4}],
          "failures": [{"approach": "bf16 tl.dot in the interpreter", "why": "garbage values", "attempt": 3}],
          "insights": ["bandwidth-bound at 70% of roofline"], "hypotheses": [], "next_plan": "try 16 splits"}


class Endpoint:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.script: list[tuple[int, object]] = []  # (status, body) per request; the last repeats

    def __enter__(self) -> "Endpoint":
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(body)
                status, answer = endpoint.script[min(len(endpoint.requests), len(endpoint.script)) - 1]
                if callable(answer):
                    status, answer = answer(body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.settings = ModelSettings(model="summarizer", base_url=f"http://127.0.0.1:{self.server.server_port}/v1",
                                      api_key_env="COMPACTION_TEST_NO_KEY", request_timeout_s=10)
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def completion(content: str) -> dict:
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "summarizer",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 700, "completion_tokens": 90, "total_tokens": 790}}


def compact_input(settings: ModelSettings) -> CompactInput:
    goal = Goal(problem="mla_decode", target="beat torch_compile", baselines=["torch_compile"])
    return CompactInput(memory=Memory(goal=goal), transcript=[{"role": "user", "content": "go"}],
                        attempts=[AttemptDigest(attempt=3, tool="test_kernel", status="incorrect", summary="NaN"),
                                  AttemptDigest(attempt=4, tool="profile_kernel", status="ok", latency_us=40.0,
                                                summary="40 us", speedup={"torch_compile": 1.5})],
                        best=BestKernel(attempt=4, latency_us=40.0, speedups={"torch_compile": 1.5}),
                        turn=12, model=settings)


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv("COMPACTION_TEST_NO_KEY", raising=False)


def test_a_valid_structured_answer_is_used():
    with Endpoint() as ep:
        ep.script = [(200, completion(json.dumps(ANSWER)))]
        res = compact_memory(compact_input(ep.settings))
    assert res.used_model, res.fallback_reason
    sent = ep.requests[0]
    assert sent["model"] == "summarizer" and sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"]["required"] == [
        "strategies", "failures", "insights", "hypotheses", "next_plan"]
    assert "tools" not in sent
    assert res.memory.failures[0].approach == "bf16 tl.dot in the interpreter"
    assert res.memory.best.attempt == 4 and res.memory.next_plan == "try 16 splits"
    assert (res.prompt_tokens, res.completion_tokens) == (700, 90)


@pytest.mark.parametrize("status, body, reason", [
    (500, {"error": {"message": "overloaded"}}, "HTTP 500"),
    (429, {"error": {"message": "slow down"}}, "HTTP 429"),
    (401, {"error": {"message": "bad key"}}, "HTTP 401"),
    (200, completion("I compacted it in my head."), "not JSON"),
])
def test_a_failing_endpoint_falls_back(status, body, reason):
    with Endpoint() as ep:
        ep.script = [(status, body)]
        res = compact_memory(compact_input(ep.settings))
    assert not res.used_model and reason in res.fallback_reason
    assert len(ep.requests) == 1  # no client-side retries: Temporal owns retrying, compaction falls back
    assert [f.attempt for f in res.memory.failures] == [3] and res.memory.best.attempt == 4


def test_an_endpoint_that_refuses_json_schema_is_asked_without_it():
    def answer(body):
        if "response_format" in body:
            return 400, {"error": {"message": "response_format json_schema is not supported"}}
        return 200, completion(json.dumps(ANSWER))
    with Endpoint() as ep:
        ep.script = [(0, answer)]
        res = compact_memory(compact_input(ep.settings))
    assert res.used_model, res.fallback_reason
    assert ["response_format" in r for r in ep.requests] == [True, False]
