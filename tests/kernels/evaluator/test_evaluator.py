"""The evaluator end to end on the CPU (Triton interpreter): `marathon eval` and `evaluate()`."""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernels.evaluator.evaluate import EvalRequest, evaluate, request_for
from kernels.problems.spec import get_problem, resolve_kernel

ROOT = Path(__file__).resolve().parents[3]
MLA_STARTER = resolve_kernel(get_problem("mla_decode"), "starter")[1]
KDA_STARTER = resolve_kernel(get_problem("kda"), "starter")[1]


def marathon_eval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "marathon.py"), "eval", *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.parametrize("problem", ["mla_decode", "kda"])
def test_starter_is_ok_on_smoke_shapes(problem):
    proc = marathon_eval("--problem", problem, "--kernel", "starter", "--device", "cpu", "--shapes", "smoke", "--json")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    v = json.loads(proc.stdout)
    assert v["status"] == "ok", v["reason"]
    assert {"status", "reason", "problem", "device", "gpu", "versions", "shapes"} <= set(v)
    assert v["device"] == "cpu" and v["gpu"] is None and v["timing_meaningful"] is False
    assert set(v["versions"]) >= {"torch", "triton"}
    spec = get_problem(problem)
    assert [s["shape"] for s in v["shapes"]] == spec.shapes("smoke")
    for s in v["shapes"]:
        assert s["correct"] and s["seeds"] == 3
        assert s["rel_err"] < spec.tolerances["float16"].rel
        assert set(s) >= {"shape", "correct", "max_abs_err", "rel_err", "latency_us", "baselines", "speedup", "roofline_pct"}
        assert s["latency_us"] > 0 and s["baselines"] and set(s["speedup"]) == set(s["baselines"])
    assert any(k.startswith("candidate.") for k in v["kernels_launched"])


def test_table_output_and_custom_shape_for_mla():
    proc = marathon_eval("--problem", "mla_decode", "--kernel", "starter", "--device", "cpu",
                         "--shape", "B=3,H=4,S=1000", "--no-baselines")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "OK" in proc.stdout and "B=3,H=4,S=1000" in proc.stdout and "not meaningful" in proc.stdout


def test_custom_shape_for_kda():
    v = evaluate(EvalRequest(problem="kda", source=KDA_STARTER, device="cpu", mode="test",
                             shapes=[{"T": 100, "K": 32, "V": 32, "H": 2}]))
    assert v.status == "ok", v.reason
    assert v.shapes[0].shape == {"B": 1, "T": 100, "H": 2, "K": 32, "V": 32}


def test_wrong_kernel_is_incorrect(tmp_path):
    # a plausible bug: the rope part of the scores is dropped
    wrong = MLA_STARTER.replace("+ tl.sum(kv_rope * q_rope[None, :], axis=1)", "")
    assert wrong != MLA_STARTER
    path = tmp_path / "wrong.py"
    path.write_text(wrong)
    proc = marathon_eval("--problem", "mla_decode", "--kernel", str(path), "--device", "cpu", "--json")
    assert proc.returncode == 1
    v = json.loads(proc.stdout)
    assert v["status"] == "incorrect" and "wrong answer" in v["reason"]


def test_fla_import_is_rejected(tmp_path):
    path = tmp_path / "fla_wrapper.py"
    path.write_text("import torch\nfrom fla.ops.kda import chunk_kda\n\n"
                    "def kda(q, k, v, g, beta, scale):\n    return chunk_kda(q, k, v, g, beta, scale=scale)[0]\n")
    proc = marathon_eval("--problem", "kda", "--kernel", str(path), "--device", "cpu", "--json")
    assert proc.returncode == 1
    v = json.loads(proc.stdout)
    assert v["status"] == "rejected" and "fla" in v["reason"]


def test_torch_fallback_is_rejected():
    # computes with torch (operators: the policy refuses torch.softmax by name) and launches a kernel
    # only for show
    source = MLA_STARTER.replace(
        "    return o\n",
        "    s = (q.float() @ kv.float().transpose(1, 2)) * scale\n"
        "    return (s @ kv.float()[..., :512]).to(q.dtype)\n")
    v = evaluate(EvalRequest(problem="mla_decode", source=source, device="cpu", mode="test"))
    assert v.status == "rejected" and "torch computed part of the answer" in v.reason


def test_compile_error_and_exception_and_timeout():
    broken = MLA_STARTER.replace("tl.arange(0, D_ROPE)", "tl.arange(0, D_ROPE) +")
    v = evaluate(EvalRequest(problem="mla_decode", source=broken, device="cpu", mode="compile"))
    assert v.status == "compile_error" and "syntax error" in v.reason, v.reason
    at_import = MLA_STARTER.replace("import torch\n", "import torch\nBLOCK = 1 // 0\n", 1)
    v = evaluate(EvalRequest(problem="mla_decode", source=at_import, device="cpu", mode="compile"))
    assert v.status == "compile_error" and "ZeroDivisionError" in v.reason, v.reason
    raises = MLA_STARTER.replace("    B, H, D = q.shape\n", "    B, H, D = q.shape\n    raise ValueError('boom')\n")
    v = evaluate(EvalRequest(problem="mla_decode", source=raises, device="cpu", mode="test"))
    assert v.status == "crashed" and "boom" in v.reason
    spins = MLA_STARTER.replace("    B, H, D = q.shape\n", "    B, H, D = q.shape\n    while True:\n        pass\n")
    v = evaluate(EvalRequest(problem="mla_decode", source=spins, device="cpu", mode="test", timeout_s=20))
    assert v.status == "timeout" and v.elapsed_s < 60


def test_output_dtype_and_shape_are_checked():
    wrong_dtype = MLA_STARTER.replace("    return o\n", "    return o.float()\n")
    v = evaluate(EvalRequest(problem="mla_decode", source=wrong_dtype, device="cpu", mode="test"))
    assert v.status == "incorrect" and "dtype" in v.reason


def test_bad_requests_fail_clearly():
    proc = marathon_eval("--problem", "kda", "--kernel", "starter", "--device", "cpu", "--shape", "T=10,X=2")
    assert proc.returncode == 2 and "no dimension X" in proc.stderr
    proc = marathon_eval("--problem", "kda", "--kernel", "nonexistent.py", "--device", "cpu")
    assert proc.returncode == 2 and "neither a file nor a shipped kernel" in proc.stderr
    with pytest.raises(KeyError):
        request_for("gemm", "starter")


def test_only_named_baselines_are_timed():
    shape = [{"B": 1, "T": 40, "H": 1, "K": 16, "V": 16}]
    both = evaluate(EvalRequest(problem="kda", source=KDA_STARTER, device="cpu", shapes=shape, probe_shapes=0,
                                only_baselines=["torch_chunked", "fla_chunk_kda"]))
    assert both.status == "ok", both.reason
    assert set(both.shapes[0].baselines) == {"torch_chunked"}  # FLA is never offered on the CPU: said so
    assert any("no baseline named fla_chunk_kda" in f for f in both.flags)
    other = evaluate(EvalRequest(problem="kda", source=KDA_STARTER, device="cpu", shapes=shape, probe_shapes=0,
                                 only_baselines=["fla_chunk_kda"]))
    assert other.status == "ok" and other.shapes[0].baselines == {}  # torch_chunked was not asked for
    assert "no baseline could be timed" in other.reason


@pytest.mark.parametrize("problem,shape", [("kda", {"B": 2, "T": 37, "H": 2, "K": 16, "V": 16}),
                                           ("mla_decode", {"B": 3, "H": 5, "S": 70})])
def test_stacked_reference_equals_one_run_per_call(problem, shape):
    # the judge re-checks several timed calls with one reference run over their stacked inputs
    from kernels.evaluator.judge import Judge
    judge = Judge(EvalRequest(problem=problem, source="", device="cpu"))
    module = judge.reference
    runs = []

    def counted(**inputs):
        runs.append(inputs)
        return module.reference(**inputs)
    judge.reference = SimpleNamespace(make_inputs=module.make_inputs, reference=counted)
    seeds = [11, 12, 13, 14]
    stacked = list(judge._references(shape, seeds))
    assert len(runs) == 1 and len(stacked) == 4  # four calls' inputs, one reference run
    for seed, ref in zip(seeds, stacked):
        alone = module.reference(**module.make_inputs(shape, seed, "cpu", judge.dtype))
        assert ref.shape == alone.shape
        torch.testing.assert_close(ref, alone, rtol=1e-5, atol=1e-5)


def test_candidate_environment(monkeypatch, tmp_path):
    # what the judge passes on to a candidate's process: no secrets, no cached autotuning picks
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "1")
    monkeypatch.setenv("TRITON_API_KEY", "sk-123")
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda")
    env = candidate_env("cuda", tmp_path)
    assert "TRITON_CACHE_AUTOTUNING" not in env and "TRITON_API_KEY" not in env
    assert env["CUDA_HOME"] == "/opt/cuda" and env["HOME"] == str(tmp_path) and "TRITON_INTERPRET" not in env
    assert candidate_env("cpu", tmp_path)["TRITON_INTERPRET"] == "1"


def test_candidate_environment_under_ncu(monkeypatch, tmp_path):
    # under ncu_metrics the candidate's process gets what Nsight Compute added to the judge's
    # environment (its injection library), and still no secrets; outside it, none of that
    import json
    import os

    from kernels.evaluator.confinement import PROFILER_BASE_ENV, env_digest
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libmine.so")
    base = {k: env_digest(v) for k, v in os.environ.items()}
    assert "LD_PRELOAD" not in candidate_env("cuda", tmp_path)
    monkeypatch.setenv(PROFILER_BASE_ENV, json.dumps(base))
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libmine.so:/opt/ncu/libInjection.so")  # changed by ncu
    monkeypatch.setenv("NV_PROFILER_PIPE", "/tmp/ncu-42")  # added by ncu
    monkeypatch.setenv("NV_API_TOKEN", "sk-123")  # added, but named like a secret
    env = candidate_env("cuda", tmp_path)
    assert env["LD_PRELOAD"].endswith("libInjection.so") and env["NV_PROFILER_PIPE"] == "/tmp/ncu-42"
    assert "NV_API_TOKEN" not in env and PROFILER_BASE_ENV not in env
    assert env["HOME"] == str(tmp_path) and env["MARATHON_SANDBOX"] == "token"


def candidate_env(device, home):
    """The candidate's environment as the judge builds it (confinement.sandbox_env with the judge's values)."""
    from kernels.evaluator.confinement import sandbox_env
    from kernels.evaluator.evaluate import PROJECT_ROOT
    from kernels.evaluator.judge import triton_cache_dir
    return sandbox_env(device, home, "token", PROJECT_ROOT, triton_cache_dir())


def test_probe_lengths_favour_short_sequences():
    """Sequence lengths of probe shapes are drawn log-uniformly: one-tile lengths (17..64 of KDA's
    1..1500 on a GPU, where the tuned scan once failed unseen) come up often, the range stays whole."""
    import random

    from kernels.evaluator.judge import probe_value
    from kernels.problems.spec import get_problem
    assert get_problem("kda").log_drawn_dims == ("T",) and get_problem("mla_decode").log_drawn_dims == ("S",)
    lo, hi = get_problem("kda").probe_ranges["cuda"]["T"]
    rng = random.Random(7)
    log_draws = [probe_value(rng, lo, hi, True) for _ in range(4000)]
    uniform_draws = [probe_value(rng, lo, hi, False) for _ in range(4000)]
    assert all(lo <= t <= hi for t in log_draws + uniform_draws)
    assert min(log_draws) == 2 and max(log_draws) > hi * 0.9  # never a single token (softmax of one key is 1)

    def short(draws):
        return sum(17 <= t <= 64 for t in draws) / len(draws)

    assert 0.14 < short(log_draws) < 0.28, short(log_draws)  # ln(65/17) / ln(1501/2) = 0.20
    assert short(uniform_draws) < 0.06


def test_seed_ranges_are_wide_and_disjoint():
    """Each evaluation draws its correctness, timing and clock seeds from ranges that never meet (one
    evaluation adds a few thousand to a draw) and are too wide to search from a call's inputs."""
    from kernels.evaluator import judge, protocol
    starts = [judge.CORRECTNESS_SEEDS, judge.TIMING_SEEDS, judge.CLOCKED_SEEDS]
    ends = [s + 3 * (judge.SEED_DRAWS - 1) + 100_000 for s in starts]
    assert all(end < nxt for end, nxt in zip(ends, starts[1:])) and ends[-1] <= protocol.MAX_SEED
    assert judge.SEED_DRAWS >= 2**48
    draws = [judge.fresh_seed(judge.TIMING_SEEDS) for _ in range(50)]
    assert len(set(draws)) == 50 and all(judge.TIMING_SEEDS <= d < ends[1] and d % 3 == draws[0] % 3 for d in draws)
