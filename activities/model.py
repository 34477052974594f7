"""The model turn: one chat completion against any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang,
Ollama), with the `openai` package's own retries off so that Temporal owns retrying.

Error mapping (raised as temporalio ApplicationError, so it works inside any activity), in one short
line that says what failed (status code and reason, the OS's reason for a connection, the delay asked
for), never the key:
  408, 409, 429, 5xx, timeouts, connection errors, unparseable answers -> retryable, honouring a
      retry-after / retry-after-ms header through next_retry_delay;
  401, 403                                                               -> ModelAuthError, non-retryable;
  400 saying the prompt is over the model's context                     -> ModelContextLength, non-retryable;
  any other 4xx (bad request, not found, ...)                            -> non-retryable.
The key is read from os.environ[settings.api_key_env] here, in the worker process, and nowhere else,
and sent only where the worker allows that variable to go (`may_send`): a run's input names both the
variable and the endpoint, and whoever can start a run must not be able to have a worker send one of
its secrets to a host of their choosing."""
from __future__ import annotations

import email.utils
import os
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

import openai
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from compaction.text import one_line
from kernels.settings import settings
from workflows.models import AgentTurnInput, AgentTurnResult, ModelSettings

RETRYABLE_STATUS = {408, 409, 429}
AUTH_STATUS = {401, 403}
BODY_CHARS = 300
# how OpenAI, vLLM, SGLang, Ollama and llama.cpp word a prompt over the context window
CONTEXT_WORDS = ("context length", "context_length", "context window", "maximum context", "too many tokens",
                 "prompt is too long", "max_model_len", "context size", "exceed_context_size")
_clients: dict[tuple, openai.OpenAI] = {}
_clients_lock = threading.Lock()
OPENAI_URL = "https://api.openai.com/v1"
# Where a worker sends a key: (variable, endpoint prefix) pairs. OpenAI's key to OpenAI by default; the
# worker's MARATHON_MODEL_KEYS adds others ("VAR=URL VAR2=URL2"), and `marathon run`'s embedded worker
# the pair its own user chose (allow_key).
DEFAULT_KEY_DESTINATIONS = (("OPENAI_API_KEY", OPENAI_URL),)
_allowed: list[tuple[str, str]] = []


def allow_key(variable: str, base_url: str | None) -> None:
    """Let this process send `variable` to `base_url` (the embedded worker of a run its user started)."""
    _allowed.append((variable, base_url or OPENAI_URL))


def key_destinations() -> list[tuple[str, str]]:
    pairs = list(DEFAULT_KEY_DESTINATIONS) + _allowed
    for item in (settings().model_keys or "").replace(";", " ").split():
        variable, sep, url = item.partition("=")
        if sep and variable and url:
            pairs.append((variable, url))
    return pairs


ANY_PORT = -2  # an allowed destination written HOST:* (a local server on a port of the day)


def _endpoint(url: str) -> tuple[str, str, int | None, str]:
    any_port = "://" in url and urlsplit(url).netloc.endswith(":*")
    parts = urlsplit(url.replace(":*", "", 1) if any_port else url)
    scheme = parts.scheme.lower()
    try:
        port = ANY_PORT if any_port else (parts.port or {"https": 443, "http": 80}.get(scheme))
    except ValueError:
        port = -1  # a malformed port matches nothing
    return scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/") + "/"


def _dot_segments(path: str) -> bool:
    """Whether a URL's path holds a `.` or `..` segment: as written, which the HTTP client resolves before
    it sends (`/v1/../../x` goes out as `/x`), or percent-encoded (`%2e%2e`, `..%2f`) or behind a
    backslash, which a proxy or server in front of the endpoint may decode and resolve."""
    from urllib.parse import unquote
    for _ in range(4):  # encoded twice or more: each layer's decoding checked
        if any(seg in (".", "..") for seg in path.replace("\\", "/").split("/")):
            return True
        decoded = unquote(path)
        if decoded == path:
            return False
        path = decoded
    return True  # encoded deeper than anyone sends in earnest


def may_send(variable: str, base_url: str | None) -> bool:
    """Whether this worker sends `variable`'s value to `base_url`: the same scheme, host and port (or any
    port, for HOST:*) as an allowed destination, and a path beneath its path. A path with a dot segment
    is refused: the path compared must be the path sent, and `/v1/../../` is not."""
    scheme, host, port, path = _endpoint(base_url or OPENAI_URL)
    if port == ANY_PORT:
        return False  # a run's endpoint names its port
    if _dot_segments(urlsplit(base_url or OPENAI_URL).path):
        return False
    for allowed_var, allowed_url in key_destinations():
        a_scheme, a_host, a_port, a_path = _endpoint(allowed_url)
        if (allowed_var == variable and (scheme, host) == (a_scheme, a_host) and a_port in (port, ANY_PORT)
                and path.startswith(a_path)):
            return True
    return False


def _client(settings: ModelSettings) -> openai.OpenAI:
    key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
    if key and not may_send(settings.api_key_env, settings.base_url):
        raise ApplicationError(
            f"this worker does not send {settings.api_key_env} to {settings.base_url or OPENAI_URL}: a run's input "
            f"cannot choose where a worker's secrets go. To allow it, start the worker with "
            f"MARATHON_MODEL_KEYS='{settings.api_key_env}={settings.base_url or OPENAI_URL}' in its environment "
            f"(an endpoint that needs no key: run with an empty api_key_env)",
            type="ModelConfigError", non_retryable=True)
    if not key:
        if settings.base_url is None:
            raise ApplicationError(
                f"no API key: set {settings.api_key_env} in the worker's environment "
                f"(or give a base_url for an endpoint that needs none)",
                type="ModelConfigError", non_retryable=True)
        key = "not-needed"  # local endpoints (vLLM, Ollama) accept any key
    ident = (settings.base_url, key, settings.request_timeout_s)
    with _clients_lock:
        client = _clients.get(ident)
        if client is None:
            client = openai.OpenAI(api_key=key, base_url=settings.base_url, max_retries=0,
                                   timeout=settings.request_timeout_s)
            _clients[ident] = client
        return client


def retry_after(headers: Any) -> timedelta | None:
    """The delay a server asked for: retry-after-ms, or retry-after in seconds or as an HTTP date."""
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return timedelta(milliseconds=max(0.0, float(ms)))
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return timedelta(seconds=max(0.0, float(value)))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            return max(timedelta(0), when - datetime.now(timezone.utc))
    except (TypeError, ValueError):
        return None


def _root_reason(exc: BaseException) -> str:
    """The innermost cause's words: '[Errno 111] Connection refused' -> 'connection refused'."""
    inner, seen = exc, 0
    while (inner.__cause__ or inner.__context__) is not None and seen < 10:
        inner, seen = inner.__cause__ or inner.__context__, seen + 1
    text = str(inner).strip() or type(inner).__name__
    if text.startswith("[Errno") and "]" in text:
        text = text.split("]", 1)[1].strip()
    return text[:1].lower() + text[1:]


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret and len(secret) >= 4 else text


def map_error(exc: Exception, secret: str | None = None) -> ApplicationError:
    """An openai exception as the ApplicationError Temporal should see; `secret` (the key) is blanked
    wherever the endpoint echoed it."""
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        phrase = getattr(exc.response, "reason_phrase", "") or ""
        code = f"HTTP {status}" + (f" {phrase}" if phrase else "")
        body = one_line(_redact(str(exc.message), secret), BODY_CHARS)
        if status in RETRYABLE_STATUS or status >= 500:
            delay = retry_after(exc.response.headers)
            wait = f"; it asked to retry after {delay.total_seconds():g} s" if delay is not None else ""
            return ApplicationError(f"model endpoint answered {code}: {body}{wait}", type=f"HTTP{status}",
                                    next_retry_delay=delay,
                                    category=ApplicationErrorCategory.BENIGN if status in (408, 429)
                                    else ApplicationErrorCategory.UNSPECIFIED)
        if status in AUTH_STATUS:
            return ApplicationError(f"model endpoint refused the credentials ({code}): {body}",
                                    type="ModelAuthError", non_retryable=True)
        if status == 400 and any(w in body.lower() for w in CONTEXT_WORDS):
            return ApplicationError(f"the prompt is over the model's context window ({code}): {body}",
                                    type="ModelContextLength", non_retryable=True)
        return ApplicationError(f"model endpoint refused the request, {code}: {body}",
                                type=f"HTTP{status}", non_retryable=True)
    if isinstance(exc, openai.APITimeoutError):
        return ApplicationError("model request timed out", type="ModelTimeout")
    if isinstance(exc, openai.APIConnectionError):
        return ApplicationError(f"model endpoint unreachable: {one_line(_redact(_root_reason(exc), secret), BODY_CHARS)}",
                                type="ModelConnectionError")
    if isinstance(exc, openai.APIResponseValidationError):
        return ApplicationError(f"unparseable answer from the model endpoint: {one_line(exc, BODY_CHARS)}",
                                type="ModelBadResponse")
    return ApplicationError(one_line(_redact(f"{type(exc).__name__}: {exc}", secret), BODY_CHARS), type="ModelError")


def chat_completion(settings: ModelSettings, messages: list[dict], tools: list[dict] | None = None,
                    response_format: dict | None = None, *, headers: dict[str, str] | None = None) -> dict:
    """One chat completion, as a plain dict (`ChatCompletion.model_dump()`: id, choices[0].message,
    choices[0].finish_reason, usage). Raises ApplicationError, retryable or not, as mapped above.
    `headers` are sent along (agent_turn sends X-Marathon-Turn: <workflow id>/<turn> for tracing)."""
    client = _client(settings)
    kwargs: dict[str, Any] = {"model": settings.model, "messages": messages}
    if tools:
        kwargs["tools"] = tools
        kwargs["tool_choice"] = settings.tool_choice
    if response_format is not None:
        kwargs["response_format"] = response_format
    if settings.temperature is not None:
        kwargs["temperature"] = settings.temperature
    if settings.max_tokens is not None:
        kwargs["max_tokens"] = settings.max_tokens
    if settings.extra_body:
        kwargs["extra_body"] = settings.extra_body
    if headers:
        kwargs["extra_headers"] = headers
    try:
        completion = client.chat.completions.create(**kwargs)
    except openai.OpenAIError as exc:  # no chained cause: its stack trace would overflow the failure
        raise map_error(exc, client.api_key) from None
    except (ValueError, KeyError, TypeError) as exc:  # a 200 whose body is not a completion
        raise ApplicationError(f"unparseable answer from the model endpoint: {type(exc).__name__}: "
                               f"{one_line(exc, BODY_CHARS)}", type="ModelBadResponse") from None
    data = completion.model_dump(mode="json", exclude_none=True)
    if not data.get("choices"):
        raise ApplicationError("the model endpoint answered without choices", type="ModelBadResponse")
    return data


def assistant_message(completion: dict) -> dict:
    """The assistant message of a completion, reduced to what goes back into a prompt."""
    msg = completion["choices"][0].get("message") or {}
    out: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
    calls = []
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        calls.append({"id": call.get("id") or "", "type": "function",
                      "function": {"name": fn.get("name") or "", "arguments": fn.get("arguments") or ""}})
    if calls:
        out["tool_calls"] = calls
    return out


def agent_turn_impl(inp: AgentTurnInput) -> AgentTurnResult:
    started = time.monotonic()
    completion = chat_completion(inp.settings, inp.messages, tools=inp.tools or None,
                                 headers={"X-Marathon-Turn": inp.turn_key} if inp.turn_key else None)
    usage = completion.get("usage") or {}
    return AgentTurnResult(
        message=assistant_message(completion),
        finish_reason=completion["choices"][0].get("finish_reason"),
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        latency_s=round(time.monotonic() - started, 3))

