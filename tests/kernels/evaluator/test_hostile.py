"""Measurement integrity: every hostile candidate in tests/hostile/ gets its exact verdict,
and honest candidates (both starters, the tuned MLA kernel) still get ok.

Each hostile file's docstring says which attack it is and which defence answers it. Cases marked
`bypass` run with MARATHON_UNSAFE_SKIP_POLICY=1, so that the run-time defences (the seal, the record
written out of the sandbox, the judge's own checks and clock, seccomp, Landlock, the network
namespace, the judge's watchdog) are tested on their own, as if an attacker had found a way past the
static policy; the same files are also judged with the policy on. Cases that test one OS fence or
the watchdog alone also switch the seal off (SEAL_OFF), which would otherwise end them first.
Cases decided by the static policy alone are judged in this process (Judge.run, no sandbox); the
others go through the judge process, as `evaluate()` does, two at a time (HOSTILE_WORKERS).

GPU-only cases (side stream at run time, CUDA illegal address, GPU memory bomb, an endless kernel
on the device) skip without CUDA; bench/hostile_gpu.py runs them on an H200."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from kernels.evaluator.evaluate import EvalRequest
from kernels.problems.spec import get_problem, resolve_kernel
from kernels.evaluator.verdict import Verdict

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = ROOT / "tests" / "hostile"


def shape(**dims: int) -> tuple:
    return tuple(dims.items())  # hashable, so that a Case can key the verdicts


MLA = (shape(B=1, H=2, S=40),)
KDA = (shape(B=1, T=20, H=1, K=16, V=16),)
MLA_LONG = (shape(B=1, H=1, S=2048),)
MLA_FORGE = (shape(B=1, H=2, S=1024),)  # long enough for low-precision accumulation to show
KDA_LONG = (shape(B=1, T=160, H=1, K=16, V=16),)
CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
BYPASS = {"MARATHON_UNSAFE_SKIP_POLICY": "1"}
SEAL_OFF = (("MARATHON_SANDBOX_SEAL", "0"),)  # for tests of a fence or the watchdog on their own
# Passes the candidate-environment filter (TRITON_ prefix): marks every sandbox process of this test
# session, so that the leftover check below finds exactly ours.
SESSION_MARK = f"TRITON_MARATHON_HOSTILE_TEST={os.getpid()}"


@dataclass(frozen=True)
class Case:
    name: str  # a file in tests/hostile/ (without .py), or "problem:shipped-kernel" for a control
    status: str
    reason: str = ""  # a substring of the verdict's reason
    mode: str = "test"
    shapes: tuple = ()
    shape_set: str | None = None
    probe: int = 0
    bypass: bool = False
    env: tuple = ()  # extra (name, value) for the judge's environment
    timeout: float = 60.0
    flag: str = ""  # a substring one of the verdict's flags must hold
    static: bool = False  # decided by the static policy: judged in this process
    cuda: bool = False
    baselines: bool = False

    @property
    def id(self) -> str:
        return (self.name + ("[run-time]" if self.bypass else "") + ("[no-seal]" if SEAL_OFF[0] in self.env else "")
                + ("[cuda]" if self.cuda else ""))

    @property
    def problem(self) -> str:
        if ":" in self.name:
            return self.name.split(":")[0]
        return "kda" if self.name.startswith("kda") else "mla_decode"

    def source(self) -> str:
        if ":" in self.name:
            problem, kernel = self.name.split(":")
            return resolve_kernel(get_problem(problem), kernel)[1]
        return (HOSTILE / f"{self.name}.py").read_text().replace("@PORT@", "9")

    def request(self) -> EvalRequest:
        shapes = self.shapes or (() if self.shape_set else (MLA if self.problem == "mla_decode" else KDA))
        return EvalRequest(problem=self.problem, source=self.source(), kernel=self.name,
                           device="cuda" if self.cuda else "cpu", mode=self.mode, shapes=[dict(s) for s in shapes],
                           shape_set=self.shape_set, seeds=3, probe_shapes=self.probe, timeout_s=self.timeout,
                           baselines=self.baselines)


S = dict(static=True, status="rejected")
# A policy hole alone earns no ok: past the static policy (each with the policy skipped), the match-class-
# pattern escape to real builtins and what it leads to meet the run-time layer: the seal (an audit hook
# installed before the candidate is imported), the record written out of the process as it happens,
# the harness's integrity check, and the judge's own clock.
LAYERING = [
    Case("mla_escape_pause_monitor", "rejected", "torch computed part of the answer", bypass=True),
    Case("mla_escape_read_file", "rejected", "on open of /etc/hostname", bypass=True),
    Case("mla_escape_read_file", "rejected", "'match' statement", static=True),  # with the policy on: the policy
    Case("mla_escape_ctypes", "rejected", "on ctypes.dlopen", bypass=True),
    Case("mla_escape_gc", "rejected", "on gc.get_objects", bypass=True),
    Case("mla_escape_shell", "rejected", "seal ended", bypass=True),
    # long enough that a call's real time (~0.3 s interpreted) stands well past the CPU's wide allowance
    Case("mla_escape_forge_timer", "rejected", "judge's own clock", mode="full", bypass=True, shapes=MLA_FORGE),
    Case("mla_read_secrets", "rejected", "import of os", bypass=True),
    Case("mla_frame_walk", "rejected", "of gi_frame", bypass=True),
    Case("mla_patch_timer", "rejected", "changed the harness", bypass=True),
    Case("mla_torch_os_route", "rejected", "on os.system", bypass=True),
    Case("kda_exec_built_string", "rejected", "on compile", bypass=True),
    # Triton re-reads a kernel's source lines: what it runs is held to the function the policy checked
    Case("mla_interpreter_source_confusion", "rejected", "not the source that was checked", bypass=True),
    Case("mla_interpreter_planted_globals", "crashed", "NameError", bypass=True),
    Case("mla_jit_decorator_source_confusion", "rejected", "not the source that was checked", bypass=True),
    Case("mla_jit_decorator_source_confusion", "rejected", "not the source that was checked", bypass=True, cuda=True),
]
CASES = [
    # stale memory, partial writes, uninitialised reads
    Case("mla_writes_nothing", "incorrect", "NaN or Inf"),
    Case("mla_partial_heads", "incorrect", "NaN or Inf"),
    Case("kda_half_sequence", "incorrect", "NaN or Inf"),
    Case("mla_uninit_accumulator", "incorrect", "depends on uninitialised memory"),
    # shape- and seed-specialised
    Case("mla_smoke_only", "incorrect", "wrong answer at", shape_set="smoke", probe=1),
    Case("kda_gate_case_specialised", "incorrect", "wrong answer at"),
    # caching, replaying, work done once
    Case("mla_pointer_cache", "rejected", "did not change with the candidate's Triton kernels disabled"),
    Case("mla_fingerprint_cache", reason="attribute 'item'", **S),
    Case("mla_fingerprint_cache", "rejected", "aten._local_scalar_dense", bypass=True),
    Case("mla_replay_idle", "rejected", "launched none of the candidate's kernels", mode="full",
         flag="module-level state changed"),
    Case("mla_replay_decoy", "incorrect", "outputs of timed calls are re-checked", mode="full",
         flag="module-level state changed"),
    Case("mla_replay_hidden_state", reason="imports 'collections'", **S),
    Case("mla_replay_hidden_state", "incorrect", "outputs of timed calls are re-checked", mode="full",
         flag="module-level state changed", bypass=True),
    Case("kda_pointer_replay", "incorrect", "outputs of timed calls are re-checked", mode="full",
         flag="module-level state changed"),
    Case("mla_deferred_answers", "incorrect", "outputs of timed calls are re-checked", mode="full"),
    # work hidden from the clock; the output must be a plain tensor with its own storage
    Case("mla_lazy_subclass", reason="attribute 'as_subclass'", **S),
    Case("mla_lazy_subclass", "incorrect", "expected a plain torch.Tensor", bypass=True),
    Case("mla_reused_output", "incorrect", "memory of an earlier call's output"),
    Case("mla_thread_hidden", reason="imports 'threading'", **S),
    Case("mla_thread_hidden", "rejected", "left threads running", bypass=True, env=SEAL_OFF),
    Case("mla_thread_hidden", "rejected", "import of threading", bypass=True),
    Case("mla_side_stream", reason="torch.cuda.Stream", **S),
    Case("mla_side_stream", "rejected", "on a stream other than the caller's", bypass=True, cuda=True),
    Case("mla_other_gpu", "crashed", "invalid device ordinal", cuda=True),  # the sandbox sees the judge's GPU alone
    # tampering
    Case("mla_patch_timer", reason="patching", **S),
    Case("mla_patch_via_alias", reason="patching", **S),
    Case("mla_print_pass", "incorrect", "wrong answer at"),
    Case("mla_forge_channel", reason="imports 'os'", **S),
    Case("mla_forge_channel", "rejected", "forged line on the result channel", bypass=True, env=SEAL_OFF),
    Case("mla_edit_project", reason="imports 'atexit'", **S),
    Case("mla_torch_os_route", reason="uses torch.sys", **S),
    Case("mla_frame_walk", reason="attribute 'gi_frame'", **S),
    Case("mla_genexpr_frame_walk", reason="attribute 'gi_frame'", **S),
    Case("mla_foreign_self_patch", reason="patching objects", **S),
    Case("mla_nonlocal_self_swap", reason="'nonlocal'", **S),
    Case("mla_global_alias_swap", reason="'global'", **S),
    Case("mla_finalizer_hook", reason="class member '__del__'", **S),
    Case("mla_raw_launch", reason="attribute 'run'", **S),
    # mutating inputs
    Case("kda_mutates_inputs", "rejected", "modified its inputs"),
    # precision downcast (the honest starters pass at the same shapes: see CONTROLS)
    Case("mla_lowp_accumulation", "incorrect", "wrong answer at", shapes=MLA_LONG),
    Case("kda_lowp_gate_cumsum", "incorrect", "wrong answer at", shapes=KDA_LONG),
    # falling back to torch, also where the monitor used to look away
    # (torch's computing functions are not on the policy's API allowlist: the monitor is tested bypassing it)
    Case("mla_torch_fallback_try", reason="uses torch.softmax", **S),
    Case("mla_torch_fallback_try", "rejected", "torch computed part of the answer", bypass=True),
    Case("mla_grid_fallback", reason="uses torch.softmax", **S),
    Case("mla_grid_fallback", "rejected", "torch computed part of the answer", bypass=True),
    # the answer computed by the launcher's Python on values read out of the tensors
    Case("mla_python_arithmetic", "rejected", "aten._local_scalar_dense"),
    Case("mla_printed_values", "rejected", "op monitor was suspended"),
    Case("mla_autotune_hook_fallback", reason="triton.Config(pre_hook=...)", **S),
    Case("mla_autotune_hook_fallback", "rejected", "torch computed part of the answer", bypass=True),
    Case("mla_duck_typed_argument", reason="class member 'data_ptr'", **S),
    Case("mla_duck_typed_argument", "rejected", "kernel argument was not a plain tensor", bypass=True),
    # compile options by launch keyword (a Config's dict): the interpreter ignores them, the sandbox does not
    Case("mla_config_compile_option", "rejected", "compile options (candidate._mla_decode_one_head got ir_override)"),
    # the interpreter's loads and stores are raw host memory: bounded to the launch's tensors
    Case("mla_interpreter_raw_memory", "crashed", "outside the launch's tensor arguments"),
    # escapes past a denylist policy: each refused by the allowlist (of syntax, names or API)
    Case("mla_match_class_pattern", reason="'match' statement", **S),
    Case("mla_format_dunder_read", reason="str.format", **S),
    Case("mla_collect_env_shell", reason="torch.utils", **S),
    Case("mla_model_zoo_fetch", reason="torch.utils", **S),
    Case("mla_file_baton_delete", reason="torch.utils.file_baton", **S),
    Case("mla_triton_driver_stream", reason="triton.runtime", **S),
    Case("mla_fx_codegen", reason="torch.fx", **S),
    Case("mla_jit_default_compile_time", reason="default '_answer()' of a @triton.jit function", **S),
    Case("mla_builtin_decorator", reason="decorator 'tl.core.builtin'", **S),
    Case("mla_autotune_bench_hook", reason="triton.Config(pre_hook=...)", **S),
    # a string spanning lines that Triton's line scanners take for the kernel (interpreter; JIT decorator)
    Case("mla_interpreter_source_confusion", reason="a string spanning lines", **S),
    Case("mla_interpreter_planted_globals", reason="which the module never binds", **S),
    Case("mla_jit_decorator_source_confusion", reason="a string spanning lines", **S),
    # a heuristic of builtins and partials computes in the autotuner's benchmarking (the CPU has no benchmarker)
    Case("mla_autotune_heuristic_builtin", "rejected", "torch computed part of the answer", cuda=True),
    Case("kda_tensor_type_import", reason="attribute 'type' called", **S),
    Case("mla_entry_reference_swap", reason="class member 'prepare'", **S),
    Case("kda_extern_library_path", reason="triton.language.core.extern_elementwise", **S),
    # banned libraries by any route
    Case("kda_fla_importlib", reason="imports 'importlib'", **S),
    Case("kda_fla_dunder_import", reason="'__import__'", **S),
    Case("kda_exec_built_string", reason="'exec'", **S),
    Case("kda_vendored_fla", reason="looks vendored from fla", **S),
    Case("mla_sys_modules_at_runtime", reason="imports 'sys'", **S),
    Case("mla_sys_modules_at_runtime", "rejected", "loaded flash_attn", bypass=True, env=SEAL_OFF),
    # resource abuse
    Case("mla_endless_python_loop", "timeout", "wall-clock limit", timeout=8),
    Case("mla_endless_kernel_loop", "timeout", "wall-clock limit", timeout=8),
    Case("mla_endless_kernel_loop", "timeout", "wall-clock limit", timeout=30, cuda=True),
    Case("mla_cpu_memory_bomb", "crashed", "of host memory", env=(("MARATHON_SANDBOX_MEMORY", str(2 * 2**30)),)),
    Case("mla_disk_filler", "crashed", "File too large"),
    Case("mla_fork_bomb", reason="imports 'os'", **S),
    Case("mla_fork_bomb", "rejected", "processes", bypass=True, env=(("MARATHON_SANDBOX_SECCOMP", "0"),) + SEAL_OFF),
    Case("mla_gpu_memory_bomb", "crashed", "out of memory", cuda=True),
    Case("mla_illegal_address", "crashed", "", cuda=True),
    Case("mla_gpu_host_memory", "crashed", "", cuda=True),  # an HMM machine would say otherwise
    # secrets and network (more in the dedicated tests below)
    Case("mla_read_secrets", reason="imports 'os'", **S),
    Case("mla_snoop_everything", reason="imports 'os'", **S),  # run time: tests/kernels/evaluator/test_confinement.py
    Case("mla_network", reason="imports 'socket'", **S),
    # the field's reward hacks, each caught without the static policy's help
    Case("mla_skip_timed_calls", "incorrect", "outputs of timed calls are re-checked", mode="full",
         flag="module-level state changed"),
    Case("mla_lazy_function_mode", reason="torch.overrides", **S),
    Case("mla_lazy_function_mode", "rejected", "a torch function mode is still active", bypass=True),
    Case("mla_gc_expected_output", reason="imports 'gc'", **S),
    Case("mla_gc_expected_output", "rejected", "import of gc", bypass=True),
    Case("mla_l2_persist_window", reason="imports 'cuda.bindings'", **S),
    Case("mla_l2_persist_window", "rejected", "import of", bypass=True),
    Case("mla_l2_persist_window", "rejected", "import of", bypass=True, cuda=True),
    *LAYERING,
]
CONTROLS = [  # honest candidates: no false rejections, and no flags
    Case("mla_decode:starter", "ok", mode="full", shape_set="smoke", probe=1, baselines=True),
    Case("kda:starter", "ok", mode="full", shape_set="smoke", probe=1, baselines=True),
    Case("mla_decode:tuned", "ok", mode="full", shape_set="smoke", probe=1),
    Case("mla_decode:starter", "ok", shapes=MLA_LONG),
    Case("kda:starter", "ok", shapes=KDA_LONG),
] + [Case("kda:tuned", "ok", mode="full", shape_set="smoke", probe=1)] * ("tuned" in get_problem("kda").shipped_kernels)


def run_judge(req: EvalRequest, env: dict[str, str] | None = None, timeout: float = 900) -> Verdict:
    """What evaluate() does, with extra variables in the judge's environment."""
    with tempfile.TemporaryDirectory(prefix="marathon-test-judge-") as tmp:
        req_path, out_path = Path(tmp) / "request.json", Path(tmp) / "verdict.json"
        req_path.write_text(req.model_dump_json())
        full_env = {**os.environ, **(env or {})}
        full_env[SESSION_MARK.split("=")[0]] = SESSION_MARK.split("=")[1]
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full_env.get("PYTHONPATH")]))
        proc = subprocess.run([sys.executable, "-m", "kernels.evaluator.judge", str(req_path), str(out_path)],
                              capture_output=True, text=True, timeout=timeout, cwd=tmp, env=full_env)
        assert proc.returncode == 0 and out_path.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
        return Verdict.model_validate_json(out_path.read_text())


def judge_case(case: Case) -> Verdict:
    if case.static:
        from kernels.evaluator.judge import Judge
        return Judge(case.request()).run()
    env = dict(case.env)
    if case.bypass:
        env.update(BYPASS)
    return run_judge(case.request(), env)


def _selected(items, param: str) -> list[Case]:
    out = []
    for item in items:
        case = getattr(getattr(item, "callspec", None), "params", {}).get(param)
        if isinstance(case, Case) and case not in out:
            out.append(case)
    return out


@pytest.fixture(scope="session")
def verdicts(request) -> dict[Case, Verdict]:
    """Every selected case, judged HOSTILE_WORKERS at a time (the judge and the sandbox are separate
    processes, so this is real parallelism)."""
    cases = [c for c in _selected(request.session.items, "case") if not c.cuda or CUDA]
    workers = int(os.environ.get("HOSTILE_WORKERS", "2"))
    def timed(case: Case) -> Verdict:
        t0 = time.monotonic()
        v = judge_case(case)
        if os.environ.get("HOSTILE_TIMES"):
            print(f"\n{time.monotonic() - t0:6.1f} s  {case.id}: {v.status}", flush=True)
        return v

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(cases, pool.map(timed, cases)))


def _explain(v: Verdict) -> str:
    return f"{v.status}: {v.reason[-1500:]}\nflags: {v.flags}\nsandbox: {v.sandbox}\nlog: {v.log_tail[-800:]}"


@pytest.mark.parametrize("case", CASES + CONTROLS, ids=lambda c: c.id)
def test_verdict(case: Case, verdicts):
    if case.cuda and not CUDA:
        pytest.skip("needs CUDA (bench/hostile_gpu.py runs it on an H200)")
    v = verdicts[case]
    assert v.status == case.status, _explain(v)
    assert case.reason in v.reason, _explain(v)
    if case.flag:
        assert any(case.flag in f for f in v.flags), _explain(v)
    if case.bypass:
        assert any("static policy was skipped" in f for f in v.flags)
    if case.status == "ok":
        assert not v.flags, _explain(v)  # honest kernels draw no suspicion
        assert v.sandbox.get("seccomp") is not None
        assert v.probe_shapes or not case.probe


def test_a_policy_hole_alone_earns_no_ok(verdicts):
    """The layering: every candidate of LAYERING, judged with the static policy skipped, is stopped by a
    run-time layer (the seal, the record, the integrity check or the judge's clock), never ok."""
    for case in [c for c in LAYERING if c.bypass and (CUDA or not c.cuda)]:
        v = verdicts[case] if case in verdicts else judge_case(case)
        assert v.status != "ok" and any("static policy was skipped" in f for f in v.flags), (case.id, _explain(v))
        assert "the source breaks the candidate policy" not in v.reason, (case.id, v.reason)


def test_every_hostile_file_is_judged_and_documented():
    files = {p.stem for p in HOSTILE.glob("*.py")}
    assert len(files) >= 20
    assert files == {c.name for c in CASES}, files ^ {c.name for c in CASES}
    for path in HOSTILE.glob("*.py"):
        doc = path.read_text().split('"""')[1]
        assert "Expected:" in doc and "Defence" in doc, path.name


# --- run-time defences that need a little set-up of their own -----------------------------------------
def test_editing_the_project_is_refused_at_run_time():
    sentinel = HOSTILE / "_sentinel_for_mla_edit_project.txt"
    sentinel.write_text("original\n")
    try:
        source = (HOSTILE / "mla_edit_project.py").read_text().replace("@SENTINEL@", str(sentinel))
        req = Case("mla_edit_project", "compile_error").request().model_copy(update={"source": source})
        v = run_judge(req, {**BYPASS, **dict(SEAL_OFF)})
        assert v.status == "compile_error" and "Permission denied" in v.reason, _explain(v)
        assert sentinel.read_text() == "original\n"
        assert '{"status": "ok"}' not in v.reason
    finally:
        sentinel.unlink(missing_ok=True)


def test_network_is_unreachable_at_run_time():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted, stop = [], threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        source = (HOSTILE / "mla_network.py").read_text().replace("@PORT@", str(port))
        req = Case("mla_network", "crashed").request().model_copy(update={"source": source})
        v = run_judge(req, {**BYPASS, **dict(SEAL_OFF)})
    finally:
        stop.set()
        thread.join()
        server.close()
    assert v.status == "crashed" and "network unreachable" in v.reason, _explain(v)
    assert not accepted, "the candidate reached a listener on the host"


def test_secrets_stay_behind_at_run_time():
    secret = "sk-hostile-test-0123456789"
    v = run_judge(Case("mla_read_secrets", "crashed").request(),
                  {**BYPASS, **dict(SEAL_OFF), "OPENAI_API_KEY": secret, "TEMPORAL_API_TOKEN": secret, "MY_SECRET": secret})
    assert v.status == "crashed" and "no secrets in the environment" in v.reason, _explain(v)
    assert secret not in v.model_dump_json()


def test_fork_bomb_meets_seccomp_at_run_time():
    v = run_judge(Case("mla_fork_bomb", "crashed").request(), {**BYPASS, **dict(SEAL_OFF)})
    if not v.sandbox.get("seccomp"):
        pytest.skip("seccomp is not available here; the watchdog case covers the fork bomb")
    assert v.status == "crashed" and "Resource temporarily unavailable" in v.reason, _explain(v)


def test_impossible_speed_is_rejected_against_the_roofline():
    """A test device profile (10 kB/s) puts the honest starter far under the roofline floor."""
    req = Case("mla_decode:starter", "rejected", mode="full").request()
    v = run_judge(req, {"MARATHON_TEST_DEVICE_PROFILE": "SLOWPOKE:1e4:1e6"})
    assert v.status == "rejected" and "under the SLOWPOKE roofline floor" in v.reason, _explain(v)


def test_suspect_speedup_is_flagged():
    from kernels.evaluator.judge import Judge
    from kernels.evaluator.roofline import DeviceProfile
    from kernels.evaluator.verdict import ShapeResult
    judge = Judge(Case("mla_decode:starter", "ok").request())
    judge.profile = DeviceProfile("FAST", 1e15, 1e18, 1e18, 0, "test")
    result = ShapeResult(shape=dict(MLA[0]), correct=True, latency_us=2.0, baselines={"torch": 50.0, "compile": 30.0},
                         speedup={"torch": 25.0, "compile": 15.0})
    judge._speed_checks(result, dict(MLA[0]))
    assert result.floor_us is not None and result.roofline_pct is not None
    assert any("15.0x faster than the strongest baseline" in f for f in judge.verdict.flags), judge.verdict.flags


def test_next_evaluation_after_abuse_is_ok(verdicts):
    """After the endless loops, bombs and fillers above, a plain evaluation still works, and no
    process of any sandbox of this session is left (a fork bomb's survivors included)."""
    v = run_judge(Case("mla_decode:starter", "ok").request())
    assert v.status == "ok", _explain(v)
    mark = SESSION_MARK.encode()
    leftovers = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes():
                leftovers.append(pid)
        except OSError:
            continue
    assert not leftovers, leftovers


def test_reproducibility_noise_is_a_flag_not_a_rejection():
    """Atomics make honest outputs differ in the last bits between runs: flagged, not failed."""
    from kernels.evaluator.judge import Judge, Outcome
    judge = Judge(Case("mla_decode:starter", "ok").request())
    ref = torch.randn(2, 4, 512)
    out = ref.half()
    judge._reproducible(dict(MLA[0]), out, out.clone(), ref)
    assert not judge.verdict.flags
    noisy = out.clone()
    noisy.view(torch.int16)[0, 0, 0] += 1  # one unit in the last place, as an atomic reordering gives
    judge._reproducible(dict(MLA[0]), out, noisy, ref)
    assert any("not bitwise reproducible" in f for f in judge.verdict.flags)
    with pytest.raises(Outcome):
        poisoned = out.clone()
        poisoned[1, 2, 3] = 6e4
        judge._reproducible(dict(MLA[0]), out, poisoned, ref)


def test_policy_routes_around_the_allowlist():
    """Unit checks of the static routes the hostile files do not each cover."""
    from kernels.evaluator.policy import check_source
    head = "import torch\nimport triton\nimport triton.language as tl\nimport typing\nimport operator\n"
    cases = {
        "x = typing.sys.modules": "typing.sys",
        "f = operator.attrgetter('os')": "operator.attrgetter",
        "x = torch._C": "torch._C",
        "x = [torch][0].os": "attribute 'os'",
        "x = q.numpy().tofile('f')": "attribute 'tofile'",
        "torch.cuda.set_per_process_memory_fraction(1.0)": "set_per_process_memory_fraction",
        "g = torch.cuda.CUDAGraph()": "torch.cuda.CUDAGraph",
        "k = kernel.add_pre_run_hook": "add_pre_run_hook",
        "d = {}\nd.x = 1": "patching objects",
    }
    for body, needle in cases.items():
        found = [str(v) for v in check_source(head + body + "\ndef kda(*a):\n    return None\n", "kda")]
        assert any(needle in f for f in found), (body, found)
    honest = head + "class Box:\n    def __init__(self):\n        self.x = 1\n\ndef kda(*a):\n    return Box()\n"
    assert check_source(honest, "kda") == []


def test_fence_self_test_switches_off_a_fence_that_breaks_honest_work(monkeypatch):
    """On a new GPU machine the judge first runs its own probe kernel (kernels/evaluator/fence_probe/) inside the fences; a fence that
    breaks it is switched off for that machine (and said so in the verdicts), the others stay."""
    import kernels.evaluator.judge as judge_module

    def fake_run(cmd, env, cwd, timeout, **kw):
        status = "ok" if env.get("MARATHON_SANDBOX_SECCOMP") == "0" else "compile_error"
        Path(cmd[-1]).write_text(json.dumps({"status": status, "reason": "ptxas: Operation not permitted"}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(judge_module.subprocess, "run", fake_run)
    choice = judge_module._probe_fences("cuda")
    assert choice["off"] == ["seccomp"] and "Operation not permitted" in choice["note"], choice

    def no_verdict(cmd, env, cwd, timeout, **kw):
        """A judge that dies before its verdict: the self-test names its last line, not an empty reason."""
        if env.get("MARATHON_SANDBOX_PIDNS") == "0":
            Path(cmd[-1]).write_text(json.dumps({"status": "ok"}))
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.CompletedProcess(cmd, 3, "", "Traceback ...\nRuntimeError: the problem process died at start\n")

    monkeypatch.setattr(judge_module.subprocess, "run", no_verdict)
    choice = judge_module._probe_fences("cuda")
    assert choice["off"] == ["pid_namespace"] and "the problem process died at start" in choice["note"], choice
