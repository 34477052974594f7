"""The seal (kernels/evaluator/seal.py): its rules, applied to frames of code under a candidate's file
name, and the hook itself in a process of its own: a forbidden event ends the process at once with the
seal's exit status and a line naming the event; honest work (a Triton kernel, dataclasses, imports of
torch and math) goes through."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from kernels.evaluator import seal, timing

ROOT = Path(__file__).resolve().parents[3]


def _sealed_in_process(tmp_path: Path):
    candidate = tmp_path / "candidate.py"
    candidate.write_text("# a stand-in\n")
    s = seal.install(candidate_file=str(candidate), scratch=str(tmp_path), workdir=str(tmp_path),
                     triton_cache=str(tmp_path / "cache"), channel_fd=2, nonce="n", mode="off")
    return s, str(candidate)


def _as_candidate(filename: str, body: str) -> dict:
    """Functions defined by code compiled under `filename`, as the candidate's module is."""
    scope: dict = {"__name__": "candidate"}
    exec(compile(textwrap.dedent(body), filename, "exec"), scope)
    return scope


def test_rules_for_candidate_frames(tmp_path):
    s, cand = _sealed_in_process(tmp_path)
    fns = _as_candidate(cand, """
        import sys
        def frame():
            return sys._getframe()
        def through_stdlib(call):
            return call()
    """)
    frame = fns["frame"]()
    deny = [
        ("open", ("/etc/passwd", "r", 0), "/etc/passwd"),
        ("open", (str(tmp_path / "candidate.py"), "r", 0), "touches no file"),
        ("os.system", ("id",), "never allowed"),
        ("subprocess.Popen", ("sh", ["sh"], None, None), "by candidate code"),
        ("socket.connect", (None, ("1.2.3.4", 80)), "never allowed"),
        ("ctypes.dlopen", ("libc.so.6",), "by candidate code"),
        ("gc.get_objects", (-1,), "by candidate code"),
        ("sys._getframe", (frame,), "by candidate code"),
        ("object.__getattr__", (frame, "f_code"), "of f_code"),
        ("compile", (b"1", "<string>"), "by candidate code"),
        ("exec", (None,), "by candidate code"),
        ("function.__new__", (None,), "by candidate code"),
        ("import", ("os", None, [], [], []), "of os"),
        ("sys.addaudithook", (), "never allowed"),
        ("sys.settrace", (None,), "never allowed"),
        ("os.putenv", ("TRITON_PTXAS_PATH", "/bin/sh"), "TRITON_PTXAS_PATH"),
    ]
    for event, args, needle in deny:
        why = s.verdict(event, args, frame)
        assert why is not None and needle in why, (event, why)
    for event, args in [("import", ("torch._refs", None, [], [], [])), ("import", ("math", None, [], [], [])),
                        ("builtins.id", (1,)), ("time.sleep", (0.1,))]:
        assert s.verdict(event, args, frame) is None, event
    # a standard-library frame in between changes nothing: inspect.currentframe() is still the candidate's
    import inspect
    assert "by candidate code" in s.verdict("sys._getframe", (frame,), fns["through_stdlib"](inspect.currentframe))


def test_what_problem_code_does_is_named_as_the_problems(tmp_path):
    """A file problem's code (compiled as `<problem NAME>`) is sealed like the candidate's, and the line
    says whose code it was."""
    s, cand = _sealed_in_process(tmp_path)
    problem = _as_candidate("<problem softplus>", """
        import sys
        def frame():
            return sys._getframe()
    """)["frame"]()
    for event, args in [("sys._getframe", ()), ("import", ("wave", None, [], [], [])), ("open", ("/etc/passwd", "r", 0)),
                        ("os.system", ("id",))]:
        why = s.verdict(event, args, problem)
        assert why is not None and "the problem file's code" in why and "candidate code" not in why, (event, why)
    candidate = _as_candidate(cand, "import sys\ndef frame():\n    return sys._getframe()\n")["frame"]()
    assert "by candidate code" in s.verdict("sys._getframe", (), candidate)


def test_rules_for_harness_and_triton_frames(tmp_path):
    s, _ = _sealed_in_process(tmp_path)
    here = sys._getframe()  # this test file is not under the harness: untrusted, like any unknown file
    assert s.verdict("open", ("/etc/hostname", "r", 0), here) is not None
    harness = _as_candidate(str(ROOT / "kernels" / "evaluator" / "stand_in.py"), """
        import sys
        def frame():
            return sys._getframe()
    """)["frame"]()
    assert s.verdict("open", (str(tmp_path / "inputs.pt"), "rb", 0), harness) is None
    assert s.verdict("open", (os.__file__, "r", 0), harness) is None
    assert "/etc/hostname" in s.verdict("open", ("/etc/hostname", "r", 0), harness)
    assert "writing" in s.verdict("open", (str(ROOT / "kernels" / "x.py"), "w", 0), harness)
    assert s.verdict("open", (str(tmp_path / "out.pt"), "wb", 0), harness) is None
    assert s.verdict("open", (str(tmp_path / "a" / ".." / ".." / "escape"), "wb", 0), harness) is not None
    assert s.verdict("os.system", ("id",), harness) is not None
    import triton
    triton_dir = os.path.dirname(triton.__file__)
    outside = _as_candidate(os.path.join(triton_dir, "runtime", "cache.py"), """
        import sys
        def frame():
            return sys._getframe()
    """)["frame"]()
    assert "outside a compile" in s.verdict("open", (str(tmp_path / "cache" / "k.so"), "wb", 0), outside)
    assert s.verdict("subprocess.Popen", ("/usr/bin/ptxas", ["ptxas"], None, None), outside) is not None


def test_stack_owner_tells_the_candidate_from_triton_benchmarking(tmp_path):
    s, cand = _sealed_in_process(tmp_path)
    import triton
    bench_file = os.path.join(os.path.dirname(triton.__file__), "testing.py")
    bench = _as_candidate(bench_file, """
        def do_bench(fn):
            return fn()
    """)["do_bench"]
    fns = _as_candidate(cand, """
        import sys
        def mine():
            return sys._getframe()
    """)
    marks = (("triton/testing.py", "do_bench"),)
    assert s.stack_owner(fns["mine"](), marks) == "candidate"
    import sys as _sys
    assert s.stack_owner(bench(lambda: _sys._getframe()), marks) == "candidate"  # the lambda is this file's: untrusted
    assert s.stack_owner(bench(_sys._getframe), marks) == "triton-bench"
    # what the benchmarking calls back into is the launch it times: an autotuner's heuristics (Triton's
    # frame) calling a builtin or a partial the candidate handed over (no frame of its own) belong to the
    # candidate's launcher further out, not to the benchmarking
    run = _as_candidate(os.path.join(os.path.dirname(triton.__file__), "runtime", "autotuner.py"), """
        def run(heuristic):
            return heuristic()
    """)["run"]
    launcher = _as_candidate(cand, """
        def launch(go):
            return go()
    """)["launch"]
    import functools
    heuristic = functools.partial(run, _sys._getframe)
    assert s.stack_owner(launcher(functools.partial(bench, heuristic)), marks) == "candidate"
    assert s.stack_owner(launcher(functools.partial(bench, _sys._getframe)), marks) == "triton-bench"


HOOKED = """
import importlib.util, json, os, sys
import torch, triton
from kernels.evaluator import seal
s = seal.install(candidate_file={cand!r}, scratch={scratch!r}, workdir={scratch!r}, triton_cache={scratch!r},
                 channel_fd=1, nonce="n0", mode="on")
spec = importlib.util.spec_from_file_location("candidate", {cand!r})
module = importlib.util.module_from_spec(spec)
module.__builtins__ = seal.candidate_builtins(s.check_import)
spec.loader.exec_module(module)
module.run()
"""


def run_hooked(tmp_path: Path, candidate: str) -> subprocess.CompletedProcess:
    cand = tmp_path / "candidate.py"
    cand.write_text(textwrap.dedent(candidate))
    script = HOOKED.format(cand=str(cand), scratch=str(tmp_path))
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)


def _sealed_line(proc) -> dict:
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.strip().startswith("{")]
    assert lines, proc.stdout + proc.stderr[-2000:]
    return lines[-1]


@pytest.mark.parametrize("action,event", [
    ("open('/etc/hostname').read()", "open"),
    ("import subprocess", "import"),
    ("torch.sys.modules['gc'].get_objects()", "gc.get_objects"),
    ("torch.sys.modules['sys'].addaudithook(lambda *a: None)", "sys.addaudithook"),
    ("torch.os.system('true')", "os.system"),
    ("eval('1 + 1')", "compile"),
])
def test_the_hook_ends_the_process_on_a_forbidden_event(tmp_path, action, event):
    proc = run_hooked(tmp_path, f"""
        import torch
        def run():
            {action}
    """)
    assert proc.returncode == seal.SEAL_EXIT, proc.stdout + proc.stderr[-2000:]
    line = _sealed_line(proc)
    assert line["kind"] == "sealed" and line["event"] == event and line["nonce"] == "n0", line


def test_the_hook_lets_honest_candidate_code_through(tmp_path):
    proc = run_hooked(tmp_path, """
        import dataclasses
        import math
        import typing
        from collections import namedtuple
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def _add_one(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

        @dataclasses.dataclass
        class Plan:
            block: int = 16

        Pair = namedtuple("Pair", "a b")
        T = typing.TypeVar("T")

        def run():
            x = torch.zeros(16)
            _add_one[(1,)](x, 16, BLOCK=Plan().block)
            assert float(x.sum()) == 16.0 and Pair(1, 2).b == 2 and math.isfinite(1.0)
            print("honest run done")
    """)
    assert proc.returncode == 0 and "honest run done" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_integrity_sees_a_replaced_method_and_a_shadowing_one():
    class Timer:
        def elapsed(self):
            return 1.0

    class Sub(Timer):
        pass

    module = types.ModuleType("stand_in")
    module.now = lambda: 1.0
    module.counter = 0
    integrity = seal.Integrity([Timer, Sub, module])
    module.counter = 5  # plain data changes by itself: not a finding
    assert integrity.changes() == []
    original = Timer.elapsed
    Timer.elapsed = lambda self: 0.0
    Sub.elapsed = lambda self: 0.0
    module.now = lambda: 0.0
    found = integrity.changes()
    assert any(f.endswith("Timer.elapsed") for f in found) and any("Sub.elapsed (added)" in f for f in found)
    assert "stand_in.now" in found, found
    Timer.elapsed = original
    del Sub.elapsed
    module.now = integrity.snapshot[2][2]["now"]
    assert integrity.changes() == []


def test_integrity_covers_the_protocols_messages():
    """The record goes out through the protocol's models: their serializers are code the seal keeps, and
    using them (validating, writing, reading) changes nothing it keeps."""
    from kernels.evaluator import candidate_process, protocol
    integrity = seal.Integrity(seal.harness_objects(candidate_process))
    line = protocol.encode_reply(protocol.OpRecord(name="aten.mm"), "0" * 32)
    protocol.read_reply(line.rstrip(), "0" * 32, protocol.CandidateReplies)
    protocol.read_request(protocol.encode_request(protocol.PingRequest()), protocol.CandidateRequests)
    assert integrity.changes() == []
    original = protocol.OpRecord.__pydantic_serializer__
    protocol.OpRecord.__pydantic_serializer__ = protocol.ProbeRecord.__pydantic_serializer__  # ops written as probes
    try:
        assert "kernels.evaluator.protocol.OpRecord.__pydantic_serializer__" in integrity.changes()
    finally:
        protocol.OpRecord.__pydantic_serializer__ = original
    assert integrity.changes() == []


def test_the_batch_digest_and_the_perturbation_are_the_same_wherever_computed():
    outs = [torch.randn(3, 5, 7).half() for _ in range(4)]
    w = timing.digest_weights(64, 123457, 99, "cpu")
    assert float(w.min()) >= -0.5 and float(w.max()) < 0.5
    d = timing.batch_digest(outs, 7919, 13, w)
    assert d == timing.batch_digest([o.clone() for o in outs], 7919, 13, w)
    other = [o.clone() for o in outs]
    pos = (torch.arange(64) * 7919 + 13) % (4 * 105)
    other[int(pos[5]) // 105].view(-1)[int(pos[5]) % 105] += 1  # one element the digest covers
    assert timing.batch_digest(other, 7919, 13, w) != d
    inputs = {"q": torch.randn(2, 8).half(), "kv": torch.randn(2, 64, 8).half(), "scale": 0.5}
    before = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    assert timing.perturb_inputs(inputs, 31337, 4) == "q"  # the smallest floating input
    assert torch.equal(inputs["kv"], before["kv"]) and not torch.equal(inputs["q"], before["q"])
    ratio = (inputs["q"].float() / before["q"].float()).nan_to_num(0.9)
    assert float(ratio.min()) >= 0.79 and float(ratio.max()) <= 1.0
    # an input longer than the factors' period: every element scaled, the factors repeating along it
    long = torch.randn(3, timing.PERTURB_PERIOD).bfloat16()
    flat = {"x": long.clone()}
    timing.perturb_inputs(flat, 31337, 4)
    f = (0.9 + 0.2 * timing.digest_weights(timing.PERTURB_PERIOD, 31337, 4, "cpu")).to(torch.bfloat16)
    assert torch.equal(flat["x"], long * f)
    strided = {"x": long.clone().t()}  # not contiguous: the same factors by position in it laid flat
    timing.perturb_inputs(strided, 31337, 4)
    assert torch.equal(strided["x"], (long.t().contiguous().view(-1) * f.repeat(3)).view(long.t().shape))
    # the clocked batch's forms (tensor arguments, captured in a CUDA graph): the judge's values exactly
    judge = timing.BatchDigest(4 * 105, 7919, 13, w, "cpu")
    for o in outs:
        judge.add(o)
    assert judge.value() == d
    params = torch.tensor([31337, 4], dtype=torch.int64)
    batch = [{"x": long.clone()}, {"x": long.clone().t()}, {"x": long.clone()}]
    timing.perturb_sets(batch, params[0], params[1])
    for k, inputs in enumerate(batch):
        alone = {"x": long.clone().t() if k == 1 else long.clone()}
        timing.perturb_inputs(alone, 31337, 4 + k)
        assert torch.equal(inputs["x"], alone["x"])
    if torch.cuda.is_available():
        assert torch.equal(timing.digest_weights(64, 123457, 99, "cuda").cpu(), w)
        assert abs(timing.batch_digest([o.cuda() for o in outs], 7919, 13, w.cuda()) - d) <= 1e-9 * (abs(d) + 1)
        again = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in before.items()}
        timing.perturb_inputs(again, 31337, 4)
        assert torch.equal(again["q"].cpu(), inputs["q"])


def _judge():
    from kernels.evaluator.evaluate import EvalRequest
    from kernels.evaluator.judge import Judge
    from kernels.problems.spec import get_problem, resolve_kernel
    source = resolve_kernel(get_problem("mla_decode"), "starter")[1]
    return Judge(EvalRequest(problem="mla_decode", source=source, device="cpu", mode="test", shapes=[{"B": 1, "H": 2, "S": 40}]))


def test_the_judge_reads_the_record_and_tells_one_that_stopped():
    from kernels.evaluator.judge import Outcome, read_record
    from kernels.evaluator.protocol import CandidateReplies
    judge = _judge()
    launch = {"kind": "rec", "what": "launch", "name": "candidate._mla", "own": True, "side": False, "odd": []}
    whole = [{"kind": "rec", "what": "begin", "call": 7}, launch, {"kind": "rec", "what": "probe"},
             {"kind": "rec", "what": "end", "call": 7, "problems": []}]

    def read(lines):  # the lines as the judge's parser types them
        return read_record([CandidateReplies.model_validate(line).root for line in lines])
    calls, outside = read(whole)
    judge._record_checks(calls, outside, [7], "")
    assert calls[7].own == 1 and not outside.kernels
    cases = {
        "no probe": ([whole[0], launch, whole[3]], "incomplete (no probe)"),
        "no end": (whole[:3], "incomplete (no end)"),
        "an op": (whole[:2] + [{"kind": "rec", "what": "op", "name": "aten.bmm"}] + whole[2:], "torch computed"),
        "a mode left": (whole[:3] + [{**whole[3], "problems": ["a torch function mode is still active"]}],
                        "torch function mode"),
        "launched later": (whole + [launch], "outside its calls"),
        "a foreign kernel": (whole[:2] + [{**launch, "name": "fla.ops.chunk", "own": False}] + whole[2:],
                             "not defined in the candidate"),
    }
    for name, (lines, needle) in cases.items():
        calls, outside = read(lines)
        with pytest.raises(Outcome) as caught:
            judge._record_checks(calls, outside, [7], "")
        assert needle in caught.value.reason, (name, caught.value.reason)


def test_the_judges_clock_bounds_the_reported_time():
    from kernels.evaluator.judge import Outcome
    from kernels.evaluator.verdict import ShapeResult, Timing
    judge = _judge()
    judge.device = "cuda"

    def check(claimed, judge_us, graphed, sync_wall=None, perturb_us=0.0, n=64):
        result = ShapeResult(shape={"B": 1}, correct=True,
                             timing=Timing(median_us=claimed, p10_us=claimed, p90_us=claimed, calls=30, sync_wall_us=sync_wall))
        judge.verdict.flags.clear()
        judge._clock_check(result, {"B": 1}, judge_us, n, 150.0, graphed, perturb_us)
        return judge.verdict.flags

    assert check(21.5, 25.0, True) == []  # an honest graph replay: about the reported time
    assert check(600.0, 700.0, True) == []
    with pytest.raises(Outcome, match="judge's own clock"):
        check(1.0, 600.0, True)  # a 600 us kernel reported as 1 us
    assert check(1.0, 21.5, True) != []  # a 21 us kernel reported as 1 us: within the GPU's wide bound, flagged
    with pytest.raises(Outcome, match="judge's own clock"):
        check(10.0, 2700.0, False, sync_wall=40.0)  # made eagerly: loose, but not that loose
    assert check(21.5, 400.0, False, sync_wall=320.0) == []  # host-bound launches, as the tuned MLA kernel's
    # a memory-bound call beside the perturbation of its 64 MiB input (an H100's figures: silu_scale
    # 4096x8192 bf16, 16 calls a batch): flagged unless the perturbation the judge timed is allowed for
    assert check(43.0, 228.0, True, n=16) != []
    flags = check(43.0, 228.0, True, perturb_us=105.9, n=16)
    assert flags == []
    with pytest.raises(Outcome, match="of it the inputs' perturbation, allowed for"):
        check(1.0, 600.0, True, perturb_us=105.9, n=16)  # the allowance does not cover a misreport
    judge.device = "cpu"
    assert check(4000.0, 60000.0, False) == []  # the interpreter on a busy CPU
    with pytest.raises(Outcome, match="judge's own clock"):
        check(280.0, 300000.0, False)


def test_the_perturbed_input_is_named_by_size_and_dtype_wherever_the_inputs_are_made():
    """What the judge's perturbation allowance is timed on: the input perturb_inputs scales (the smallest
    floating-point one), from real inputs or from a file problem's meta inputs alike."""
    inputs = {"q": torch.ones(2, 3, dtype=torch.bfloat16), "cache": torch.ones(50, 3, dtype=torch.bfloat16),
              "lengths": torch.ones(4, dtype=torch.int64)}
    assert timing.perturbed_numel(inputs) == (6, torch.bfloat16)
    assert timing.perturbed_numel({k: v.to("meta") for k, v in inputs.items()}) == (6, torch.bfloat16)
    assert timing.perturbed_numel({"n": torch.ones(3, dtype=torch.int32)}) == (0, None)
    assert timing.perturbation_us(0, torch.float32) == 0.0
