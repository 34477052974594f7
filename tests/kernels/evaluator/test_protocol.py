"""The protocol between the judge and its candidate and problem processes (kernels/evaluator/protocol.py):
every message survives its trip over the wire; a message with a field it does not name, a field of the
wrong type or past its bound is refused; the judge's reader refuses a line with an unknown kind, a
wrong nonce or no JSON object, and uses nothing of it; the module imports neither torch nor Triton."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from pydantic import ValidationError

from kernels.evaluator import protocol as p

NONCE = "0123456789abcdef" * 2
FACTS = dict(new_modules=["triton.x"], output_problem=None, threads_alive=[], state_changed=["CACHE"], tampered=[])
FIGURES = dict(times_us=[10.5, 11.0], graph_times_us=[9.0], graph_error=None, wall_s=0.5, sync_wall_us=[12.0],
               phases={"warmup": [0], "timed": [1, 2], "sync": [3], "graph": [4]})
FENCES = {"seccomp": True, "landlock_abi": 6, "processes": "none", "gpu_memory_fraction": 0.8}

ASSIGNMENTS = [
    p.CandidateAssignment(nonce=NONCE, candidate="/s/in/candidate.py", entry="mla_decode", device="cuda",
                          seccomp=False, writable="/s/work:/tmp/triton", readable="/s/in", toolchain="triton",
                          gpu_memory_fraction=0.8, fsize=2**26, seal="report"),
    p.CandidateAssignment(nonce=NONCE, candidate="/s/in/candidate.py", entry="ModelNew", device="cpu",
                          problem_file="/s/in/problem.py", problem_name="23_Softmax", param_seed=12345),
    p.ProblemAssignment(nonce=NONCE, problem_file="/s/in/problem.py", problem_name="23_Softmax", device="cpu"),
]
CANDIDATE_REQUESTS = [
    p.CallRequest(problem="mla_decode", seed=7, output="/s/work/out_0_0.pt", shape=[2, 4, 64], dtype="float16",
                  noop=True, fill=0x7B, problem_shape={"B": 2, "H": 4, "S": 100}, index=3, input_dtype="float16"),
    p.TimeRequest(problem="kda", shape={"B": 1, "dim": -1}, dtype="bfloat16", seed_base=2**22 + 9, reps=30, warmup=5,
                  sync_reps=5, graph=True, keep_bytes=2**33),
    p.SaveTimedRequest(indices=[1, 5, 9], dir="/s/work", clear=False),
    p.ArmRequest(problem="mla_decode", shape={"B": 1}, dtype="float32", capture_seeds=[1, 2], seeds=[3, 4],
                 index=1_000_000, a=5, b=6, graph=False),
    p.FireRequest(pa=1, pb=2, da=3, db=2**31 - 2),
    p.PingRequest(), p.ForgetRequest(), p.ExitRequest(),
]
PROBLEM_REQUESTS = [
    p.SpecRequest(shape={"N": 4}, dtype="float32"),
    p.MinBytesRequest(shape={"N": 4}, elem=4),
    p.ReferenceRequest(shape={"N": 4}, seed=3, dtype="float32", perturb=(7, 8), output="/s/problem/reference_1.pt"),
    p.ReferenceRequest(shape={"N": 4}, seed=3, dtype="float32", output="/s/problem/reference_2.pt"),
    p.BaselineNamesRequest(),
    p.BaselinesRequest(shape={"N": 4}, seeds=[1, 2], dtype="float32", names=["eager", "compile"], reps=3, warmup=1,
                       sync_reps=0, limit_rel=4e-3),
    p.FactsRequest(small=True), p.RunsRequest(shapes=[{"N": 4}, {"N": 8}]), p.ExitRequest(),
]
CANDIDATE_REPLIES = [
    p.FencedReply(fences=FENCES),
    p.CandidateReadyReply(import_s=0.25, new_modules=["candidate_helper"], banned_modules=[], fences=FENCES, threads=2),
    p.ErrorReply(error="Traceback ...\nValueError: x", compile=True, fatal=True),
    p.CalledReply(seconds=0.01, inputs_mutated=[1], **FACTS),
    p.TimedReply(**FIGURES, seeds={"0": 9, "1": 10}, facts=p.CallFacts(**FACTS), kept=[1, 2]),
    p.SavedReply(files={"1": "/s/work/timed_1.pt"}, tampered=["torch.Tensor.add"]),
    p.ArmedReply(graph=False, graph_error="RuntimeError: not capturable"),
    p.FiredReply(digest=-0.125, output_problem=None),
    p.FiredReply(digest=None, output_problem="returned shape (1,); expected (2,)"),
    p.PongReply(), p.ForgotReply(),
    p.BeginRecord(call=4), p.EndRecord(call=4, problems=["the torch dispatch mode stack was changed"]),
    p.LaunchRecord(name="candidate._kernel", own=True, side=False, odd=["builtins.object"]),
    p.OpRecord(name="aten.bmm"), p.ProbeRecord(), p.ThreadRecord(),
    p.SealRecord(event="open", why="of /etc/passwd, by candidate code"),
    p.SealedReply(event="socket.__new__", why="by candidate code"),
]
PROBLEM_REPLIES = [
    p.FencedReply(fences=FENCES), p.ProblemReadyReply(),
    p.ErrorReply(error="OSError: no space"),
    p.ProblemErrorReply(error="problem x, line 12: ZeroDivisionError", line=12, detail="Traceback ..."),
    p.SpecReply(shape=[128, 4096], dtype="float32", input_bytes=2**21),
    p.MinBytesReply(bytes=4096.0),
    p.ReferencedReply(inputs_s=0.01, reference_s=0.2),
    p.BaselineNamesReply(names=["eager", "compile"]),
    p.BaselinesReply(results={"eager": p.BaselineTimed(timing=p.TimingFigures(**FIGURES)),
                              "compile": p.BaselineFailed(error="not offered"),
                              "odd": p.BaselineDisagrees(rel=math.inf)}),
    p.FactsReply(facts={"name": "x", "sizes": {"N": 4}, "constants": {"eps": 1e-5, "big": math.inf}}),
    p.RunsReply(calls=[{"shape": {"N": 4}, "status": "ok", "seconds": 0.1}]),
]


def _read(message: p.Message, replies) -> p.Message:
    return p.read_reply(p.encode_reply(message, NONCE).rstrip(b"\n"), NONCE, replies)


@pytest.mark.parametrize("message", ASSIGNMENTS, ids=lambda m: type(m).__name__)
def test_assignments_round_trip(message):
    line = p.encode_request(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert p.read_request(line, type(message)) == message


@pytest.mark.parametrize("message", CANDIDATE_REQUESTS, ids=lambda m: m.op)
def test_candidate_requests_round_trip(message):
    assert p.read_request(p.encode_request(message), p.CandidateRequests) == message


@pytest.mark.parametrize("message", PROBLEM_REQUESTS, ids=lambda m: m.op)
def test_problem_requests_round_trip(message):
    assert p.read_request(p.encode_request(message), p.ProblemRequests) == message


@pytest.mark.parametrize("message", CANDIDATE_REPLIES, ids=lambda m: type(m).__name__)
def test_candidate_replies_round_trip(message):
    line = p.encode_reply(message, NONCE)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["nonce"] == NONCE  # on every line, as the seal's own lines carry it
    back = p.read_reply(line.rstrip(b"\n"), NONCE, p.CandidateReplies)
    assert type(back) is type(message) and back == message


@pytest.mark.parametrize("message", PROBLEM_REPLIES, ids=lambda m: type(m).__name__)
def test_problem_replies_round_trip(message):
    back = _read(message, p.ProblemReplies)
    assert type(back) is type(message) and back == message


def test_a_nan_digest_crosses_as_nan():
    """A digest of outputs that hold a NaN is NaN, not null: the outputs' own check reports them."""
    back = _read(p.FiredReply(digest=math.nan, output_problem=None), p.CandidateReplies)
    assert math.isnan(back.digest)


def test_the_seals_own_line_is_read_as_the_protocols():
    """kernels/evaluator/seal.py writes its lines with json.dumps, not through the models."""
    line = json.dumps({"kind": "sealed", "event": "os.system", "why": "by candidate code", "nonce": NONCE}).encode()
    assert p.read_reply(line, NONCE, p.CandidateReplies) == p.SealedReply(event="os.system", why="by candidate code")


@pytest.mark.parametrize("bad", [
    {"op": "call", "problem": "m", "seed": 1, "output": "/o", "shape": [1], "dtype": "float32",
     "problem_shape": {"B": 1}, "input_dtype": "float32", "extra": 1},  # a field it does not name
    {"op": "call", "problem": "m", "seed": -1, "output": "/o", "shape": [1], "dtype": "float32",
     "problem_shape": {"B": 1}, "input_dtype": "float32"},  # a negative seed
    {"op": "call", "problem": "m", "seed": 1, "output": "/o", "shape": [1], "dtype": "torch.float32",
     "problem_shape": {"B": 1}, "input_dtype": "float32"},  # not a dtype's name
    {"op": "call", "problem": "m", "seed": 1, "output": "/o", "shape": [1], "dtype": "float32", "fill": 256,
     "problem_shape": {"B": 1}, "input_dtype": "float32"},  # not a byte
    {"op": "call", "problem": "m", "seed": "1", "output": "/o", "shape": [1], "dtype": "float32",
     "problem_shape": {"B": 1}, "input_dtype": "float32"},  # a number as text: no coercion
    {"op": "time", "problem": "m", "shape": {"B": 1}, "dtype": "float32", "seed_base": 1, "reps": 10**7, "warmup": 1},
    {"op": "save_timed", "indices": [1], "dir": ""},  # an empty path
    {"op": "fire", "pa": 1, "pb": 2, "da": 3},  # a factor missing
    {"op": "fire", "pa": 1.5, "pb": 2, "da": 3, "db": 4},
    {"op": "launch"},  # no such op
    {"op": "ping", "nonce": NONCE},
])
def test_malformed_requests_are_refused(bad):
    with pytest.raises(ValidationError):
        p.read_request(json.dumps(bad), p.CandidateRequests)


@pytest.mark.parametrize("bad", [
    {},  # no nonce
    {"nonce": "x" * 32},  # not hex
    {"nonce": NONCE, "candidate": "/c.py", "entry": "f", "device": "tpu"},
    {"nonce": NONCE, "candidate": "/c.py", "entry": "f(); import os", "device": "cpu"},
    {"nonce": NONCE, "candidate": "/c.py", "entry": "f", "device": "cpu", "gpu_memory_fraction": 2.0},
    {"nonce": NONCE, "candidate": "/c.py", "entry": "f", "device": "cpu", "seal": "maybe"},
    {"nonce": NONCE, "candidate": "/c.py", "entry": "f", "device": "cpu", "toolchain": "gcc"},
    {"nonce": NONCE, "candidate": "/c.py", "entry": "f", "device": "cpu", "problem_file": "/p.py"},  # no name
    {"nonce": NONCE, "candidate": "/c.py", "entry": "f", "device": "cpu", "fsize": 0},
    {"nonce": NONCE, "candidate": "/c.py", "entry": "f", "device": "cpu", "unknown_switch": 1},
])
def test_malformed_assignments_are_refused(bad):
    with pytest.raises(ValidationError):
        p.read_request(json.dumps(bad), p.CandidateAssignment)


def _line(**fields) -> bytes:
    return json.dumps({**fields, "nonce": fields.pop("nonce", NONCE)}).encode()


@pytest.mark.parametrize("line, why", [
    (b"not json", "garbage"),
    (b"[1, 2]", "garbage"),
    (json.dumps({"what": "op", "nonce": NONCE}).encode(), "garbage"),  # no kind
    (b'{"kind": "pong", "nonce": "' + b"f" * 32 + b'"}', "forged"),  # another run's nonce
    (b'{"kind": "pong"}', "forged"),  # none
    (b'{"kind": "pong", "nonce": 7}', "forged"),
    (b'{"kind": "pong", "nonce": "\\ud800"}', "forged"),  # not even text
    (_line(kind="launched"), "malformed"),  # an unknown kind
    (_line(kind="rec", what="launch"), "malformed"),  # its fields missing
    (_line(kind="rec", what="syscall", name="x"), "malformed"),  # an unknown record
    (_line(kind="pong", extra=True), "malformed"),  # a field it does not name
    (_line(kind="called", seconds=-1.0, inputs_mutated=[], **FACTS), "malformed"),  # past a bound
    (_line(kind="called", seconds=float("nan"), inputs_mutated=[], **FACTS), "malformed"),
    (_line(kind="called", seconds="0.1", inputs_mutated=[], **FACTS), "malformed"),  # no coercion
    (_line(kind="called", seconds=0.1, inputs_mutated=[], **{**FACTS, "threads_alive": ["t" * (p.MAX_NAME + 1)]}),
     "malformed"),  # an oversized name
    (_line(kind="timed", **{**FIGURES, "phases": {"timed": [1], "later": [2]}}, seeds={}, facts=FACTS, kept=[]),
     "malformed"),  # an unknown phase
    (_line(kind="timed", **{**FIGURES, "times_us": [1.0] * (p.MAX_CALLS + 1)}, seeds={}, facts=FACTS, kept=[]),
     "malformed"),  # too many times
    (_line(kind="saved", files={"1": "/x", "two": "/y"}, tampered=[]), "malformed"),
    (_line(kind="error", error="e" * (p.MAX_TEXT + 1)), "malformed"),
    (_line(kind="fired", digest="0.5", output_problem=None), "malformed"),
    (_line(kind="ready"), "malformed"),  # the problem process's ready, not the candidate's
    (_line(kind="referenced", inputs_s=0.1, reference_s=0.1), "malformed"),  # a problem process's reply
])
def test_the_judges_reader_refuses_what_is_not_the_protocols(line, why):
    with pytest.raises(p.Refused) as refused:
        p.read_reply(line, NONCE, p.CandidateReplies)
    assert refused.value.why == why


def test_the_problem_processes_replies_are_their_own():
    with pytest.raises(p.Refused) as refused:
        p.read_reply(_line(kind="rec", what="probe"), NONCE, p.ProblemReplies)  # it keeps no record
    assert refused.value.why == "malformed"
    with pytest.raises(p.Refused):
        p.read_reply(_line(kind="spec", shape=[4], dtype="float32", input_bytes=-1), NONCE, p.ProblemReplies)
    assert p.read_reply(_line(kind="ready"), NONCE, p.ProblemReplies) == p.ProblemReadyReply()


def test_the_nonce_is_checked_before_the_fields():
    """A line without this run's nonce is forged, whatever else it says: the judge rejects the candidate
    rather than reporting a malformed reply."""
    with pytest.raises(p.Refused) as refused:
        p.read_reply(_line(kind="launched", nonce="f" * 32), NONCE, p.CandidateReplies)
    assert refused.value.why == "forged"


def test_an_oversized_line_is_refused_unread():
    line = b'{"kind": "error", "error": "' + b"x" * p.MAX_LINE_BYTES + b'", "nonce": "' + NONCE.encode() + b'"}'
    with pytest.raises(p.Refused) as refused:
        p.read_reply(line, NONCE, p.CandidateReplies)
    assert refused.value.why == "garbage" and "bytes" in refused.value.detail


def test_a_refusal_names_the_field_not_its_value():
    secret = "s" * (p.MAX_NAME + 1)
    with pytest.raises(p.Refused) as refused:
        p.read_reply(_line(kind="rec", what="op", name=secret), NONCE, p.CandidateReplies)
    assert "name" in refused.value.detail and secret not in str(refused.value) and len(refused.value.detail) <= 300


def test_messages_are_frozen():
    message = p.FireRequest(pa=1, pb=2, da=3, db=4)
    with pytest.raises(ValidationError):
        message.pa = 9


def test_the_protocol_imports_neither_torch_nor_triton():
    code = ("import sys; import kernels.evaluator.protocol; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


class _Running:
    """A stand-in for the process: still running, never waited on."""
    pid = -1

    def poll(self):
        return None


def _judge_reads(*lines: bytes):
    """The judge's CandidateProcess reading these lines from its reply pipe (no process behind it): the
    messages it returns, or the Outcome it raises, and whether it killed the process."""
    import os

    from kernels.evaluator.judge import CandidateProcess, Outcome
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"".join(line + b"\n" for line in lines))
    os.close(write_fd)
    proc = object.__new__(CandidateProcess)
    killed = []
    proc.nonce, proc.buffer, proc.budget_s = NONCE, b"", 60.0
    proc.replies, proc.proc, proc.kill = os.fdopen(read_fd, "rb"), _Running(), lambda: killed.append(True)
    try:
        return [proc.receive() for _ in lines], killed
    except Outcome as outcome:
        return outcome, killed
    finally:
        proc.replies.close()


def test_the_judge_reads_the_protocols_lines():
    got, killed = _judge_reads(_line(kind="rec", what="probe"), _line(kind="pong"))
    assert got == [p.ProbeRecord(), p.PongReply()] and not killed


@pytest.mark.parametrize("line, status, needle, kills", [
    (_line(kind="pong", nonce="f" * 32), "rejected", "forged line", True),
    (_line(kind="launched"), "crashed", "not the protocol's", True),
    (_line(kind="called", seconds=-1.0, inputs_mutated=[], **FACTS), "crashed", "seconds", True),
    (b"{not json", "crashed", "garbage", False),
    (_line(kind="sealed", event="os.system", why="by candidate code"), "rejected", "seal ended", True),
])
def test_the_judge_turns_a_refused_line_into_a_verdict(line, status, needle, kills):
    """Never an exception of the judge's own: a verdict, and nothing of the line used."""
    from kernels.evaluator.judge import Outcome
    outcome, killed = _judge_reads(line)
    assert isinstance(outcome, Outcome) and outcome.status == status and needle in outcome.reason, outcome
    assert bool(killed) == kills
