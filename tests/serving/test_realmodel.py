"""The llm policy against a real OpenAI-compatible server and a real model: `marathon run` on MLA decode
with llama.cpp's server and SmolLM2-135M (serving/model_server.py), through a relay that keeps every
exchange. What the model says is its own (tool calls, prose, malformed or cut-off arguments, a dozen
calls in one reply); the test asserts what must hold with any model: the server refused nothing, every
prompt was within the context budget by the server's own count, every reply is in the workflow's history
with each of its tool calls answered, and the run ended on its budget with a report."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from serving.scripted_model import FakeOpenAI, Reply
from marathon_support import ROOT

pytestmark = [pytest.mark.realmodel, pytest.mark.slow, pytest.mark.timeout(2400)]

CONTEXT_BUDGET = 3500  # tokens a prompt may use (the server's window is 8192)
MAX_TOKENS = 128  # one reply: about 5 s of a 135M model on one core
TOOL_CALLS = 10
ENDED_ON_BUDGET = ("tool-call budget spent", "the model made no tool call")


class Relay:
    """Forwards each chat completion to the real server as it came and keeps both sides."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.exchanges: list[dict] = []  # key ("<workflow id>/<turn>", "" for a compaction), request, status, body

    def __call__(self, key: str, delivery: int, request: dict) -> Reply:
        req = urllib.request.Request(self.base_url + "/chat/completions", data=json.dumps(request).encode(),
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=1200) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.exchanges.append({"key": key, "request": request, "status": status, "body": body, "raw": raw[:2000]})
        return Reply(status=status, body=raw)


def _history_turns(state, workflow_id: str) -> list[tuple[dict, dict]]:
    """(input, result) of every completed agent_turn in the run's event history, in order."""
    from temporalio.client import Client
    from temporalio.converter import DataConverter

    from reports.local import reading, run_db
    from workflows import names

    async def read(address: str) -> list[tuple[dict, dict]]:
        client = await Client.connect(address)
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        conv = DataConverter.default.payload_converter
        inputs, turns = {}, []
        for ev in history.events:
            if ev.HasField("activity_task_scheduled_event_attributes"):
                a = ev.activity_task_scheduled_event_attributes
                if a.activity_type.name == names.AGENT_TURN:
                    inputs[ev.event_id] = conv.from_payloads(a.input.payloads)[0]
            elif ev.HasField("activity_task_completed_event_attributes"):
                a = ev.activity_task_completed_event_attributes
                if a.scheduled_event_id in inputs:
                    turns.append((inputs[a.scheduled_event_id], conv.from_payloads(a.result.payloads)[0]))
        return turns

    with reading(run_db(state, workflow_id)) as address:
        return asyncio.run(read(address))


def test_llm_run_against_a_real_model_server(real_model_server, tmp_path):
    from activities.model import assistant_message

    relay = Relay(real_model_server.base_url)
    with FakeOpenAI(relay, keyed=True, keep_requests=False, strict=False) as front:
        out = subprocess.run(
            [sys.executable, "marathon.py", "run", "--problem", "mla_decode", "--device", "cpu",
             "--model", "smollm2", "--base-url", front.base_url, "--max-tokens", str(MAX_TOKENS),
             "--tool-choice", "required", "--context-budget", str(CONTEXT_BUDGET),
             "--max-tool-calls", str(TOOL_CALLS), "--json", "--state-dir", str(tmp_path)],
            cwd=ROOT, capture_output=True, text=True, timeout=2200)
    # kept for a post-mortem: what was asked and answered, in order, and the run's own words
    (tmp_path / "exchanges.json").write_text(json.dumps(
        [{k: v for k, v in x.items() if k != "raw"} for x in relay.exchanges], indent=1))
    (tmp_path / "run.stderr").write_text(out.stderr)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["policy"] == "llm"
    assert report["stop_reason"].startswith(ENDED_ON_BUDGET), report["stop_reason"]
    assert 1 <= report["tool_calls"] <= TOOL_CALLS

    # the server refused nothing: no message sequence its chat template rejects (400), no prompt over its
    # window (400), no reply it could not parse (500)
    refused = [(x["key"], x["status"], x["raw"]) for x in relay.exchanges if x["status"] != 200]
    assert not refused, refused
    # a turn asked again (an activity attempt retried, e.g. one that missed its heartbeat on a busy machine)
    # is answered again; the last answer is the one recorded
    last = {x["key"]: x for x in relay.exchanges if "/" in x["key"]}
    turns = [last[k] for k in sorted(last, key=lambda k: int(k.rsplit("/", 1)[1]))]
    assert turns and len(turns) == report["turns"] == report["tokens"]["calls"]
    # the context budget held in the server's own count (the tool schemas included)
    counted = [x["body"]["usage"]["prompt_tokens"] for x in turns]
    assert max(counted) <= CONTEXT_BUDGET, counted
    assert report["tokens"]["max_prompt_tokens"] == max(counted)

    # every reply is in the history as the model gave it, and every tool call it made was answered next
    history = _history_turns(tmp_path, report["workflow_id"])
    assert [result["message"] for _, result in history] == [assistant_message(x["body"]) for x in turns]
    assert [inp["messages"] for inp, _ in history] == [x["request"]["messages"] for x in turns]
    for (_, result), (nxt, _) in zip(history, history[1:]):
        calls = [c["id"] for c in result["message"].get("tool_calls") or []]
        answered = [m["tool_call_id"] for m in nxt["messages"] if m["role"] == "tool"]
        if calls and calls[0] in answered:  # (a compaction in between may have summarized the turn away)
            assert set(calls) <= set(answered)
    assert sum(len(r["message"].get("tool_calls") or []) for _, r in history) >= report["tool_calls"] - 1

    # the report folder
    html = tmp_path / "reports" / report["workflow_id"] / "report.html"
    assert report["report"] == str(html) and html.is_file()
