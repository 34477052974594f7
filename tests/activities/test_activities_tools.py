"""The plain functions behind the activities: the bookkeeping tools, the artifact store, the model call's
error mapping (against a local fake endpoint), the tool-argument parser. No Temporal server needed."""
from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.exceptions import ApplicationError

from activities import tools
from activities.artifacts import ArtifactStore, capped, sha256_text
from activities.evaluation import describe, digest, ncu_path
from activities.model import agent_turn_impl, chat_completion, retry_after
from serving.scripted_model import FakeOpenAI, Reply, completion, error
from kernels.evaluator.verdict import ShapeResult, Timing, Verdict
from marathon_support import STARTER_MLA, mla_variant
from workflows.models import (AgentTurnInput, Attempt, EditInput, EvalDigest, EvalSettings, ListInput, ModelSettings,
                              NoteInput, PrepareInput, ShowInput, SourceRef, WriteInput)
from workflows.toolspec import TOOLS, EditArgs, ShowArgs, parse_call


@pytest.fixture
def store(tmp_path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


def test_artifact_store_is_content_addressed_and_idempotent(store):
    key = store.put("hello")
    assert key == sha256_text("hello") and store.put("hello") == key
    assert store.get(key) == "hello" and store.has(key)
    with pytest.raises(KeyError):
        store.get("0" * 64)
    with pytest.raises(KeyError):
        store.path("../../etc/passwd")
    text, full = capped("x" * 10_000, 1000, store)
    assert len(text) <= 1000 and full is not None and store.get(full) == "x" * 10_000
    assert capped("short", 1000, store) == ("short", None)


def test_write_kernel_records_the_candidate(store):
    res = tools.write_kernel(WriteInput(source=mla_variant(BLOCK_S=32), attempt=3, entry_point="mla_decode"), store)
    assert res.ok and res.source is not None and res.config == {"BLOCK_S": 32, "num_warps": 4}
    assert "attempt 3" in res.text and res.source.text == mla_variant(BLOCK_S=32)
    assert store.get(res.source.sha256) == mla_variant(BLOCK_S=32)
    # over the inline cap, the source travels as its key only
    big = tools.write_kernel(WriteInput(source=STARTER_MLA, attempt=4, entry_point="mla_decode", inline_cap=100), store)
    assert big.source.text is None and tools.source_text(big.source, store) == STARTER_MLA


def test_write_kernel_refusals_and_warnings(store):
    assert not tools.write_kernel(WriteInput(source="  ", attempt=1, entry_point="f"), store).ok
    assert not tools.write_kernel(WriteInput(source="x" * 100, attempt=1, entry_point="f", max_bytes=10), store).ok
    res = tools.write_kernel(WriteInput(source="def f(:\n", attempt=1, entry_point="f"), store)
    assert res.ok and "does not parse" in res.text  # a candidate still: compile_kernel reports the error
    res = tools.write_kernel(WriteInput(source="def g():\n    pass\n", attempt=1, entry_point="f"), store)
    assert "no top-level `def f" in res.text


def test_edit_kernel(store):
    cur = tools.source_ref(STARTER_MLA, store, 100_000)
    ok = tools.edit_kernel(EditInput(current=cur, old='"BLOCK_S": 16', new='"BLOCK_S": 64', attempt=2,
                                     entry_point="mla_decode"), store)
    assert ok.ok and ok.config["BLOCK_S"] == 64 and "diff:" in ok.text
    missing = tools.edit_kernel(EditInput(current=cur, old="BLOCK_SS = 3", new="", attempt=2, entry_point="x"), store)
    assert not missing.ok and "does not occur" in missing.text
    twice = tools.edit_kernel(EditInput(current=cur, old="BLOCK_S", new="B", attempt=2, entry_point="x"), store)
    assert not twice.ok and "times" in twice.text
    assert not tools.edit_kernel(EditInput(current=cur, old="", new="x", attempt=2, entry_point="x"), store).ok


def test_show_list_note(store):
    ref = tools.source_ref(STARTER_MLA, store, 10)  # not inline: show reads the store
    shown = tools.show_kernel(ShowInput(label="attempt 0", source=ref, output_cap=100_000), store)
    assert STARTER_MLA in shown.text
    attempts = [Attempt(n=0, origin="start", sha256="a" * 64, config={"BLOCK_S": 16}),
                Attempt(n=1, origin="edit", parent=0, sha256="b" * 64,
                        evals=[EvalDigest(tool="profile_kernel", mode="full", status="ok", reason="", speedup=1.25,
                                          baseline="torch", latency_us=10.0)])]
    listed = tools.list_attempts(ListInput(attempts=attempts, total=2, best=1, current=1), store)
    assert "1.25x vs torch" in listed.text and "edit of 0" in listed.text and "BLOCK_S=16" in listed.text
    assert tools.note(NoteInput(workflow_id="w", seq=1, text="keep kv in smem"), store).ok
    assert not tools.note(NoteInput(workflow_id="w", seq=2, text=" "), store).ok


def test_prepare_resolves_the_start(store):
    setup = tools.prepare(PrepareInput(problem="mla_decode", eval=EvalSettings(device="cpu")), store)
    assert setup.entry_point == "mla_decode" and setup.kernel_label == "starter"
    assert setup.shape_set == "smoke" and setup.shapes and setup.tunables["BLOCK_S"] == [8, 16, 32, 64]
    assert "mla_decode" in setup.statement
    inline = tools.prepare(PrepareInput(problem="kda", source="def kda(): pass\n"), store)
    assert inline.kernel_label == "inline" and inline.tunables is None and inline.shapes == []
    with pytest.raises(KeyError):
        tools.prepare(PrepareInput(problem="nope"), store)


def test_prepare_reads_no_file_an_input_names(store, tmp_path):
    """A kernel that is not shipped is refused by name, never read from the worker's disk: a file of the
    user's travels as its text."""
    secret = tmp_path / "secret.env"
    secret.write_text("OPENAI_API_KEY=canary\n")
    for kernel in (str(secret), "secret.env", "tuned.py"):
        with pytest.raises(ValueError, match="kernel:.*not a shipped kernel of mla_decode"):
            tools.prepare(PrepareInput(problem="mla_decode", kernel=kernel), store)
    assert not any("canary" in p.read_text() for p in store.root.rglob("*") if p.is_file())
    assert tools.prepare(PrepareInput(problem="mla_decode", kernel="tuned"), store).kernel_label == "tuned"


def _ok_verdict(sha: str, speedup: float) -> Verdict:
    return Verdict(status="ok", reason="fine", problem="mla_decode", kernel="attempt 1", device="cpu", mode="full",
                   source_sha256=sha, shapes=[ShapeResult(shape={"B": 1}, correct=True, latency_us=10.0 / speedup,
                                                          baselines={"torch": 10.0}, speedup={"torch": speedup})])


def test_find_verdict_answers_only_with_what_the_runs_evaluations_recorded(store):
    """The recorded verdicts of a source: found for the run's own workflow ids and scope only, the best of
    them, read back from the store (a verdict whose bytes were changed is no evidence), with the source
    and its CONFIG as the store holds them."""
    from activities.evaluation import find_verdict
    from workflows.models import VerdictLookup, verdict_scope

    source = mla_variant(BLOCK_S=32)
    sha = store.put(source)
    settings = EvalSettings(device="cpu")
    scope = verdict_scope("mla_decode", None, settings)
    slow, fast = (store.put(_ok_verdict(sha, x).model_dump_json()) for x in (1.5, 2.5))
    store.record_verdict(scope, "run/agent-1", sha, slow)
    store.record_verdict(scope, "run/agent-2", sha, fast)

    def look(ids=("run", "run/agent-1", "run/agent-2"), **kw):
        inp = dict(workflow_ids=list(ids), problem="mla_decode", settings=settings, source_sha256=sha)
        return find_verdict(VerdictLookup(**{**inp, **kw}), store)

    found = look()
    assert found.workflow_id == "run/agent-2" and found.digest.speedup == 2.5 and found.verdict.status == "ok"
    assert found.source.text == source and found.source.sha256 == sha and found.config["BLOCK_S"] == 32
    assert look(ids=("run", "run/agent-1")).digest.speedup == 1.5
    assert look(ids=("other-run", "other-run/agent-2")).verdict is None  # another run's evaluations
    assert look(settings=EvalSettings(device="cpu", seeds=1)).verdict is None  # judged otherwise
    assert look(problem="kda").verdict is None
    assert look(source_sha256=sha256_text("return q")).verdict is None  # never evaluated
    # a verdict file edited in place no longer hashes to its key: not evidence
    store.path(fast).write_text(_ok_verdict(sha, 999.0).model_dump_json())
    assert look().digest.speedup == 1.5
    # a failed verdict, or another source's, recorded under this one is not taken either
    bad = _ok_verdict(sha, 50.0).model_copy(update={"status": "incorrect"})
    other = _ok_verdict(sha256_text("x"), 60.0)
    for v in (bad, other):
        store.record_verdict(scope, "run", sha, store.put(v.model_dump_json()))
    assert look().digest.speedup == 1.5


def test_verdict_digest_and_description():
    t = Timing(median_us=10.0, p10_us=9.0, p90_us=11.0, calls=30)
    v = Verdict(status="ok", reason="fine", problem="mla_decode", kernel="attempt 2", device="cuda",
                timing_meaningful=True, shapes=[
                    ShapeResult(shape={"B": 1}, correct=True, latency_us=10.0, timing=t,
                                baselines={"torch": 20.0, "torch_compile": 12.0},
                                speedup={"torch": 2.0, "torch_compile": 1.2}, floor_us=2.0, roofline_pct=20.0),
                    ShapeResult(shape={"B": 2}, correct=True, latency_us=40.0, timing=t,
                                baselines={"torch": 44.0, "torch_compile": 60.0},
                                speedup={"torch": 1.1, "torch_compile": 1.5})])
    d = digest("profile_kernel", v, "k" * 64)
    assert d.speedup == 1.1 and d.baseline == "torch" and d.speedups == {"torch": 1.1, "torch_compile": 1.2}
    assert d.latency_us == 20.0 and d.roofline_pct == 20.0
    text = describe("profile_kernel", 2, v)
    assert text.startswith("profile attempt 2: OK") and "2x vs torch" in text and "20.0% of roofline" in text


def test_parse_call():
    assert isinstance(parse_call("edit_kernel", '{"old": "a", "new": "b"}')[0], EditArgs)
    assert parse_call("show_kernel", "")[0] == ShowArgs()
    assert parse_call("show_kernel", {"attempt": 3})[0].attempt == 3
    _, err = parse_call("edit_kernel", '{"old": "a", ')
    assert err.startswith("error:") and "not valid JSON" in err
    _, err = parse_call("edit_kernel", '{"old": "a"}')
    assert "new" in err and "Field required" in err
    _, err = parse_call("edit_kernel", "[1, 2]")
    assert "JSON object" in err
    _, err = parse_call("rm_rf", "{}")
    assert "no tool" in err
    assert {t["function"]["name"] for t in TOOLS} == {"write_kernel", "edit_kernel", "compile_kernel", "test_kernel",
                                                      "profile_kernel", "show_kernel", "list_attempts", "note"}


def test_retry_after_parsing():
    assert retry_after({"retry-after": "2"}) == timedelta(seconds=2)
    assert retry_after({"retry-after-ms": "250"}) == timedelta(milliseconds=250)
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == timedelta(0)  # in the past
    assert retry_after({"retry-after": "soon"}) is None and retry_after({}) is None and retry_after(None) is None


def test_model_errors_map_to_temporal_retry_semantics(monkeypatch):
    monkeypatch.setenv("MARATHON_TEST_KEY", "sk-test")
    monkeypatch.setenv("MARATHON_MODEL_KEYS", "MARATHON_TEST_KEY=http://127.0.0.1:*")  # the worker lets it go there
    replies = {0: completion("thinking", [("note", {"text": "x"})], prompt_tokens=77, completion_tokens=5),
               1: error(429, retry_after=1.5), 2: error(500), 3: error(503), 4: error(408), 5: error(409),
               6: error(400), 7: error(401), 8: error(404), 9: Reply(body=b"<html>not json</html>"),
               10: error(429)}
    seen_keys = []

    def script(turn, delivery, request):
        return replies[turn]

    with FakeOpenAI(script) as fake:
        s = ModelSettings(model="m", base_url=fake.base_url, api_key_env="MARATHON_TEST_KEY", request_timeout_s=5)
        out = agent_turn_impl(AgentTurnInput(settings=s, messages=[{"role": "user", "content": "go"}], tools=TOOLS,
                                             turn_key="wf/0"))
        assert out.message["tool_calls"][0]["function"] == {"name": "note", "arguments": '{"text": "x"}'}
        assert (out.prompt_tokens, out.completion_tokens) == (77, 5)
        outcomes = {}
        for t in range(1, 11):
            with pytest.raises(ApplicationError) as info:
                chat_completion(s, [{"role": "user", "content": "x"}], headers={"X-Marathon-Turn": f"wf/{t}"})
            outcomes[t] = (info.value.non_retryable, info.value.next_retry_delay)
        seen_keys = [x.turn for x in fake.seen]
    assert outcomes[1] == (False, timedelta(seconds=1.5))
    assert all(not outcomes[t][0] for t in (2, 3, 4, 5, 9, 10))  # retried by Temporal
    assert all(outcomes[t][0] for t in (6, 7, 8))  # other 4xx: not retryable
    assert seen_keys == list(range(0, 11)) and len(seen_keys) == 11  # client retries are off: one request each


def test_model_timeouts_are_retryable(monkeypatch):
    with FakeOpenAI(lambda t, d, r: Reply(body={}, delay_s=3.0)) as fake:
        s = ModelSettings(model="m", base_url=fake.base_url, api_key_env="", request_timeout_s=0.5)
        with pytest.raises(ApplicationError) as info:
            chat_completion(s, [{"role": "user", "content": "x"}])
    assert not info.value.non_retryable and info.value.type == "ModelTimeout"


def test_missing_key_for_the_default_endpoint_is_not_retryable(monkeypatch):
    monkeypatch.delenv("SURELY_UNSET_KEY", raising=False)
    with pytest.raises(ApplicationError) as info:
        chat_completion(ModelSettings(model="m", api_key_env="SURELY_UNSET_KEY"), [])
    assert info.value.non_retryable and "SURELY_UNSET_KEY" in str(info.value)


def test_ncu_path_prefers_the_named_binary(monkeypatch, tmp_path):
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MARATHON_NCU", str(fake))
    assert ncu_path() == str(fake)
    monkeypatch.setenv("MARATHON_NCU", str(tmp_path / "missing"))
    assert ncu_path() is None  # a wrong name is not silently replaced by another ncu
    monkeypatch.delenv("MARATHON_NCU")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ncu_path() == str(fake)


def test_ncu_metrics_reruns_the_judge_under_ncu(monkeypatch, tmp_path):
    # A stand-in for ncu that runs the real judge it is given (so the probe request must be one the
    # judge accepts) and reports one CSV row per kernel it was asked for, with facts of its own run
    # as the metric values: the judge's mode and whether the environment digests came along.
    import json

    from activities.evaluation import ncu_metrics
    from kernels.evaluator.evaluate import request_for
    fake = tmp_path / "ncu"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, subprocess, sys\n"
        "args = sys.argv[1:]\n"
        "names = args[args.index('--kernel-name') + 1].removeprefix('regex:').split('|')\n"
        "req_path, out_path = args[-2], args[-1]\n"
        "subprocess.run(args[args.index('--metrics') + 2:], check=True, stdout=subprocess.DEVNULL)\n"
        "status = json.load(open(out_path))['status']\n"
        "mode = json.load(open(req_path))['mode']\n"
        "digests = 'MARATHON_NCU_BASE_ENV' in os.environ\n"
        "print('\"Kernel Name\",\"gpu__time_duration.sum\",\"launch__registers_per_thread\",\"lts__t_sector_hit_rate.pct\"')\n"
        "for n in names:\n"
        "    print(f'\"{n}\",\"{mode}\",\"{status}\",\"{digests}\"')\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MARATHON_NCU", str(fake))
    req = request_for("mla_decode", "starter", device="cpu", shapes=[{"B": 1, "H": 2, "S": 40}], baselines=False)
    found = ncu_metrics(req, ["candidate._mla_decode_one_head"], timeout_s=300)
    assert isinstance(found, dict), found
    (name, metrics), = found.items()
    assert name == "_mla_decode_one_head"
    # one call of the candidate in the sandbox (no reference), which the judge reported as fine
    assert metrics == {"duration_ns": "compile", "registers_per_thread": "ok", "l2_hit_pct": "True"}, json.dumps(found)


def test_a_key_goes_only_where_the_worker_lets_it(monkeypatch):
    """A run's input names the key's variable and the endpoint: a worker sends a key only to a destination
    its own environment allows, so a run cannot have a worker send its secrets to a host of the run's choosing."""
    from activities.model import may_send
    monkeypatch.setenv("MARATHON_TEST_KEY", "sk-canary-destination")
    monkeypatch.delenv("MARATHON_MODEL_KEYS", raising=False)
    assert may_send("OPENAI_API_KEY", None) and may_send("OPENAI_API_KEY", "https://api.openai.com/v1/")
    for url in ("https://api.openai.com.evil.example/v1", "http://api.openai.com/v1", "https://api.openai.com:444/v1",
                "https://evil.example/v1", "https://api.openai.com/v10"):
        assert not may_send("OPENAI_API_KEY", url), url
    assert not may_send("MARATHON_TEST_KEY", "https://api.openai.com/v1")
    monkeypatch.setenv("MARATHON_MODEL_KEYS", "MARATHON_TEST_KEY=http://127.0.0.1:*/v1")
    assert may_send("MARATHON_TEST_KEY", "http://127.0.0.1:8123/v1") and not may_send("MARATHON_TEST_KEY", "http://127.0.0.2:8123/v1")
    monkeypatch.delenv("MARATHON_MODEL_KEYS")
    with FakeOpenAI(lambda t, d, r: completion("hi")) as fake:
        s = ModelSettings(model="m", base_url=fake.base_url, api_key_env="MARATHON_TEST_KEY", request_timeout_s=5)
        with pytest.raises(ApplicationError) as info:
            chat_completion(s, [{"role": "user", "content": "x"}])
        assert info.value.non_retryable and info.value.type == "ModelConfigError"
        assert "MARATHON_MODEL_KEYS" in str(info.value) and "sk-canary-destination" not in str(info.value)
        assert fake.seen == []  # nothing was sent
        monkeypatch.setenv("MARATHON_MODEL_KEYS", f"OTHER=https://x.example MARATHON_TEST_KEY={fake.base_url}")
        assert chat_completion(s, [{"role": "user", "content": "x"}]) is not None
        assert len(fake.seen) == 1
