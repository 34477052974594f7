"""A scripted model endpoint: an OpenAI-compatible chat-completions server (stdlib http.server in a
thread) that answers from a script instead of a model, so a run's orchestration can be rehearsed and
its faults drilled with no model at all (serving/chaos.py, bench/orchestration_overhead.py, the tests).
The script is a function (turn, delivery, request) -> Reply, where `turn` comes from the
X-Marathon-Turn header the agent_turn activity sends (so a retried turn gets the same answer; -1 for
requests without it, such as compaction summaries) and
`delivery` counts how often that turn was asked (1 on the first request), so faults can be injected
on the first delivery only: a 429 with retry-after, a 500, a malformed answer. `down()` and `up()`
close and reopen the listening port (an endpoint that refuses connections); a Reply's `after` runs
once it is sent, on a connection then closed (e.g. to take the endpoint down right after a turn).

It refuses what a real server refuses (llama.cpp's with a strict chat template):
a message sequence such templates reject (400: two user turns in a row, a system message not first, a
tool result not right after the assistant call it answers), a prompt holding a tool call whose arguments
are not JSON (500, as llama.cpp), and a prompt over `n_ctx` by its own count (400, llama.cpp's words). That count (`count_tokens`, a small vocabulary's: 2.5 bytes a token) is the
usage.prompt_tokens of a completion that does not script one."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # a dict (JSON) or bytes (sent verbatim)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    after: Callable[[], None] | None = None


def completion(content: str = "", tool_calls: list[tuple[str, Any]] | None = None, *, turn: int = 0,
               prompt_tokens: int | None = None, completion_tokens: int = 20) -> Reply:
    """A chat completion whose message calls `tool_calls`: (name, arguments) with arguments a dict
    (JSON-encoded here) or a string (sent as is, so it can be malformed). prompt_tokens None: the
    server's own count of the request."""
    calls = []
    for i, (name, args) in enumerate(tool_calls or []):
        calls.append({"id": f"call_{turn}_{i}", "type": "function",
                      "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}})
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = calls
    return Reply(body={
        "id": f"chatcmpl-{turn}", "object": "chat.completion", "created": int(time.time()), "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": (prompt_tokens or 0) + completion_tokens}})


def error(status: int, message: str = "scripted error", retry_after: float | None = None) -> Reply:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    return Reply(status=status, headers=headers,
                 body={"error": {"message": message, "type": "scripted", "code": status}})


BYTES_PER_TOKEN = 2.5  # SmolLM2's tokenizer on Triton code and tracebacks: 2.3 to 2.6


def count_tokens(request: dict) -> int:
    """The prompt's tokens as a server with a small vocabulary counts them: the messages' texts and the
    tool schemas at BYTES_PER_TOKEN, 5 a message for the template's markers."""
    text = 0
    for m in request.get("messages") or []:
        content = m.get("content")
        text += len((content if isinstance(content, str) else json.dumps(content or "")).encode())
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            text += len(str(fn.get("name") or "").encode()) + len(str(fn.get("arguments") or "").encode()) + 30
    text += len(json.dumps(request.get("tools") or []).encode())
    return int(text / BYTES_PER_TOKEN) + 5 * len(request.get("messages") or []) + 3


def sequence_error(messages: list[dict]) -> str | None:
    """Why a strict chat template refuses these messages, or None: the system message first and only there,
    user and assistant turns alternating (tool results count as the user's turn; a user message may follow
    them), a tool result only after the assistant turn whose call it answers, the last message the user's
    or a tool result."""
    expect, ids = "user", set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "system":
            if i:
                return "a system message is only allowed first"
        elif role == "user":
            if expect == "assistant":
                return "roles must alternate: two user turns in a row"
            if expect == "tool":
                return "the assistant called tools: their results must come before a user message"
            expect = "assistant"
        elif role == "assistant":
            if expect == "user":
                return "roles must alternate: an assistant turn must follow a user turn"
            if expect == "tool":
                return "the assistant called tools: their results must come next"
            ids = {c.get("id") for c in m.get("tool_calls") or []}
            expect = "tool" if ids else "user"
        elif role == "tool":
            if expect not in ("tool", "results"):
                return "a tool result must follow the assistant call it answers"
            if m.get("tool_call_id") not in ids:
                return "a tool result answers no call of the assistant turn before it"
            expect = "results"
        else:
            return f"unknown role {role}"
    if expect in ("user", "tool"):
        return "the last message must be the user turn or tool results"
    return None


@dataclass
class Seen:
    turn: int
    delivery: int
    request: dict
    size: int
    at: float
    key: str = ""  # the whole X-Marathon-Turn header: "<workflow id>/<turn>"


class FakeOpenAI:
    def __init__(self, script: Callable[[Any, int, dict], Reply], keep_requests: bool = True,
                 keyed: bool = False, *, strict: bool = True, n_ctx: int | None = None) -> None:
        """keyed: the script gets the whole turn key ("<workflow id>/<turn>") instead of the turn number,
        and deliveries count per key: several workflows (a run's agents) share one endpoint.
        strict: refuse what a strict chat template refuses; n_ctx: refuse a prompt over it (our count);
        a relay to a real server passes strict=False, the real one judges."""
        self.script = script
        self.strict = strict
        self.n_ctx = n_ctx
        self.keep_requests = keep_requests
        self.keyed = keyed
        self.seen: list[Seen] = []
        self.deliveries: dict[Any, int] = {}
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if not self.path.endswith("/chat/completions"):
                    self._send(Reply(status=404, body={"error": {"message": f"no route {self.path}"}}))
                    return
                request = json.loads(raw or b"{}")
                header = self.headers.get("x-marathon-turn") or ""
                try:
                    turn = int(header.rsplit("/", 1)[-1])
                except ValueError:
                    turn = -1
                which = header if fake.keyed else turn
                with fake.lock:  # turn -1: a request without the header (e.g. a compaction summary)
                    delivery = fake.deliveries.get(which, 0) + 1
                    fake.deliveries[which] = delivery
                    fake.seen.append(Seen(turn, delivery, request if fake.keep_requests else {}, len(raw), time.time(),
                                          header))
                try:
                    reply = fake.refusal(request) or fake.script(which, delivery, request)
                except Exception as exc:  # a broken script answers 599 so its caller sees it
                    reply = Reply(status=599, body={"error": {"message": f"script failed: {exc!r}"}})
                if isinstance(reply.body, dict) and (reply.body.get("usage") or {}).get("prompt_tokens", 0) is None:
                    reply.body["usage"]["prompt_tokens"] = count_tokens(request)
                    reply.body["usage"]["total_tokens"] += reply.body["usage"]["prompt_tokens"]
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                try:
                    self._send(reply)
                except (BrokenPipeError, ConnectionResetError):  # the asker died waiting (a killed worker)
                    self.close_connection = True

            def _send(self, reply: Reply) -> None:
                body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if reply.after is not None:  # the client must not keep this connection for its next request
                    self.send_header("connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                if reply.after is not None:
                    reply.after()

        self.handler = Handler
        self.port = 0
        self._bind()

    def refusal(self, request: dict) -> Reply | None:
        """The 400 a real server answers this request with, or None."""
        if not self.strict:
            return None
        why = sequence_error(request.get("messages") or [])
        if why:
            return Reply(status=400, body={"error": {"code": 400, "type": "invalid_request_error", "message":
                                                     f"Unable to generate parser for this template: {why}"}})
        for m in request.get("messages") or []:
            for call in m.get("tool_calls") or []:
                try:
                    json.loads((call.get("function") or {}).get("arguments") or "")
                except ValueError as exc:  # llama.cpp's answer, on every retry of the same prompt
                    return Reply(status=500, body={"error": {"code": 500, "type": "server_error", "message":
                                                             f"Failed to parse tool call arguments as JSON: {exc}"}})
        n = count_tokens(request)
        if self.n_ctx is not None and n > self.n_ctx:
            return Reply(status=400, body={"error": {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": n, "n_ctx": self.n_ctx,
                "message": f"request ({n} tokens) exceeds the available context size ({self.n_ctx} tokens), "
                           "try increasing it"}})
        return None

    def _bind(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def down(self) -> None:
        """Stop listening: new connections are refused until up()."""
        self.server.shutdown()
        self.server.server_close()

    def up(self) -> None:
        self._bind()
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "FakeOpenAI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
