"""The GPU half of the hostile suite, and the no-false-rejection check on a real GPU.

    python bench/hostile_gpu.py [--out .marathon/bench/hostile_gpu.json] [--budget 200] [--workers 4]

1. A quick honest control first. If the sandbox's fences (seccomp, Landlock, network namespace)
   break honest work on this machine, they are switched off one at a time until the control passes,
   and the verdicts say which fences ran (`sandbox`); the JSON records the fallback.
2. The tuned (honest, fast) kernels at the bench shapes with timing, one at a time: status ok, no
   flags beyond the informational ones, latency, roofline: no false rejections on the GPU.
3. GPU-only hostile candidates (side stream at run time, CUDA illegal address, an endless kernel,
   timing-based replay, bf16 precision downcast, and the CPU ones that touch the GPU path), several
   judges at a time.
4. The GPU memory bomb alone, then an honest evaluation right after it: the next evaluation works.
5. The starters at the bench shapes with timing, if time is left.

Every verdict is written to the JSON as soon as it exists, so a run cut short still reports what it
did; items that would start after the time budget are listed as skipped."""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernels.evaluator.evaluate import EvalRequest
from kernels.problems.spec import get_problem, resolve_kernel
from kernels.evaluator.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent

HOSTILE = ROOT / "tests" / "hostile"
BYPASS = {"MARATHON_UNSAFE_SKIP_POLICY": "1"}
FENCE_ONLY = {**BYPASS, "MARATHON_SANDBOX_SEAL": "0"}  # a fence or the watchdog alone: the seal would end it first
MLA_SMALL = [{"B": 1, "H": 16, "S": 1024}]
KDA_SMALL = [{"B": 1, "T": 256, "H": 2, "K": 64, "V": 64}]
MLA_LONG = [{"B": 1, "H": 16, "S": 8192}]
KDA_LONG = [{"B": 1, "T": 1024, "H": 2, "K": 64, "V": 64}]


def item(name, expect, reason="", *, problem=None, mode="test", shapes=None, shape_set=None, env=None,
         timeout=120.0, baselines=False, probe=1, kernel=None):
    problem = problem or ("kda" if name.startswith("kda") else "mla_decode")
    return {"name": name, "expect": expect, "reason": reason, "problem": problem, "mode": mode,
            "shapes": shapes if shapes is not None else ([] if shape_set else (KDA_SMALL if problem == "kda" else MLA_SMALL)),
            "shape_set": shape_set, "env": env or {}, "timeout": timeout, "baselines": baselines, "probe": probe,
            "kernel": kernel}


CONTROL = item("control", "ok", kernel="starter")
HOSTILE_ITEMS = [
    item("mla_side_stream", "rejected", "on a stream other than the caller's", env=BYPASS),
    item("mla_side_stream", "rejected", "torch.cuda.Stream"),
    item("mla_illegal_address", "crashed"),
    item("mla_gpu_host_memory", "crashed"),  # ok here: the GPU reads the process's host memory (HMM)
    item("mla_config_compile_option", "rejected", "compile options"),
    item("mla_autotune_heuristic_builtin", "rejected", "torch computed part of the answer"),
    item("mla_other_gpu", "crashed", "invalid device ordinal"),
    item("mla_endless_kernel_loop", "timeout", "wall-clock limit", timeout=25),
    item("mla_replay_decoy", "incorrect", "outputs of timed calls are re-checked", mode="full"),
    item("mla_replay_idle", "rejected", "launched none of the candidate's kernels", mode="full"),
    item("mla_lowp_accumulation", "incorrect", "wrong answer at", shapes=MLA_LONG),
    item("kda_lowp_gate_cumsum", "incorrect", "wrong answer at", shapes=KDA_LONG),
    item("mla_uninit_accumulator", "incorrect", "depends on uninitialised memory"),
    item("mla_writes_nothing", "incorrect", "NaN or Inf"),
    item("kda_pointer_replay", "incorrect", "outputs of timed calls are re-checked", mode="full"),
    item("mla_thread_hidden", "rejected", "left threads running", env=FENCE_ONLY),
    item("mla_fork_bomb", "crashed", "Resource temporarily unavailable", env=FENCE_ONLY),
    item("mla_network", "crashed", "network unreachable", env=FENCE_ONLY),
    # past the policy, with the seal on: the run-time layer on a GPU
    item("mla_l2_persist_window", "rejected", "import of", env=BYPASS),
    item("mla_escape_ctypes", "rejected", "on ctypes.dlopen", env=BYPASS),
    item("mla_escape_pause_monitor", "rejected", "torch computed part of the answer", env=BYPASS),
    item("mla_lazy_function_mode", "rejected", "a torch function mode is still active", env=BYPASS),
    item("mla_printed_values", "rejected", "op monitor was suspended", shapes=[{"B": 1, "H": 2, "S": 40}]),  # Python-slow
    item("mla_skip_timed_calls", "incorrect", "outputs of timed calls are re-checked", mode="full"),
    item("mla_escape_forge_timer", "rejected", "judge's own clock", mode="full", env=BYPASS,
         shapes=[{"B": 8, "H": 16, "S": 16384}]),
    item("mla_torch_fallback_try", "rejected", "torch computed part of the answer", env=BYPASS),
    item("mla_cpu_memory_bomb", "crashed", "of host memory", env={"MARATHON_SANDBOX_MEMORY": str(4 * 2**30)}),
    # the rest of the run-time layer past the policy, as tests/kernels/evaluator/test_hostile.py judges it on the CPU
    item("mla_escape_read_file", "rejected", "on open of /etc/hostname", env=BYPASS),
    item("mla_escape_gc", "rejected", "on gc.get_objects", env=BYPASS),
    item("mla_escape_shell", "rejected", "seal ended", env=BYPASS),
    item("mla_read_secrets", "rejected", "import of os", env=BYPASS),
    item("mla_frame_walk", "rejected", "of gi_frame", env=BYPASS),
    item("mla_patch_timer", "rejected", "changed the harness", env=BYPASS),
    item("mla_torch_os_route", "rejected", "on os.system", env=BYPASS),
    item("kda_exec_built_string", "rejected", "on compile", env=BYPASS),
    item("mla_grid_fallback", "rejected", "torch computed part of the answer", env=BYPASS),
    item("mla_autotune_hook_fallback", "rejected", "torch computed part of the answer", env=BYPASS),
    item("mla_duck_typed_argument", "rejected", "kernel argument was not a plain tensor", env=BYPASS),
    item("mla_lazy_subclass", "incorrect", "expected a plain torch.Tensor", env=BYPASS),
    item("mla_gc_expected_output", "rejected", "import of gc", env=BYPASS),
    item("mla_pointer_cache", "rejected", "did not change with the candidate's Triton kernels disabled"),
    item("mla_reused_output", "incorrect", "memory of an earlier call's output"),
    item("kda_mutates_inputs", "rejected", "modified its inputs"),
]
BOMB = [item("mla_gpu_memory_bomb", "crashed", "out of memory"),
        item("after_gpu_memory_bomb", "ok", kernel="starter")]
HONEST = [
    item("mla_decode_tuned_bench", "ok", kernel="tuned", problem="mla_decode", mode="full", shape_set="bench",
         timeout=300),
    item("kda_tuned_bench", "ok", kernel="tuned", problem="kda", mode="full", shape_set="bench", timeout=300),
    item("mla_decode_starter_bench", "ok", kernel="starter", problem="mla_decode", mode="full", shape_set="bench",
         timeout=300),
    item("kda_starter_bench", "ok", kernel="starter", problem="kda", mode="full", shape_set="bench", timeout=300),
]


def source_of(it: dict) -> str:
    if it["kernel"]:
        return resolve_kernel(get_problem(it["problem"]), it["kernel"])[1]
    return (HOSTILE / f"{it['name']}.py").read_text().replace("@PORT@", "9")


DEVICE = "cuda"


def run_judge(it: dict, fence_env: dict) -> dict:
    req = EvalRequest(problem=it["problem"], source=source_of(it), kernel=it["name"], device=DEVICE, mode=it["mode"],
                      shapes=it["shapes"], shape_set=it["shape_set"], seeds=3, timeout_s=it["timeout"],
                      baselines=it["baselines"], probe_shapes=it["probe"])
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="marathon-gpu-judge-") as tmp:
        req_path, out_path = Path(tmp) / "request.json", Path(tmp) / "verdict.json"
        req_path.write_text(req.model_dump_json())
        env = {**os.environ, **fence_env, **it["env"]}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        try:
            proc = subprocess.run([sys.executable, "-m", "kernels.evaluator.judge", str(req_path), str(out_path)],
                                  capture_output=True, text=True, timeout=it["timeout"] + 240, cwd=tmp, env=env)
        except subprocess.TimeoutExpired:
            return {"name": it["name"], "expect": it["expect"], "status": "judge-timeout", "pass": False,
                    "wall_s": round(time.monotonic() - t0, 1)}
        if proc.returncode != 0 or not out_path.exists():
            return {"name": it["name"], "expect": it["expect"], "status": "judge-error", "pass": False,
                    "error": (proc.stdout + proc.stderr)[-2000:], "wall_s": round(time.monotonic() - t0, 1)}
        v = Verdict.model_validate_json(out_path.read_text())
    ok = v.status == it["expect"] and it["reason"] in v.reason
    if it["expect"] == "ok":  # no suspicion either, beyond the informational flags
        ok = ok and not [f for f in v.flags if not any(w in f for w in ("faster than the strongest baseline",
                                                                           "not bitwise reproducible"))]
    return {
        "name": it["name"], "runtime_bypass": bool(it["env"].get("MARATHON_UNSAFE_SKIP_POLICY")),
        "expect": it["expect"], "expect_reason": it["reason"], "status": v.status, "pass": ok,
        "reason": v.reason[-1200:], "flags": v.flags, "sandbox": v.sandbox, "wall_s": round(time.monotonic() - t0, 1),
        "phases_s": v.phases_s,
        "gpu": v.gpu.model_dump() if v.gpu else None, "versions": v.versions,
        "shapes": [{"shape": r.shape, "rel_err": r.rel_err, "latency_us": r.latency_us,
                    "graph_us": r.timing.graph_median_us if r.timing else None, "baselines": r.baselines,
                    "speedup": r.speedup, "floor_us": r.floor_us, "roofline_pct": r.roofline_pct}
                   for r in v.shapes],
        "probe_shapes": [{"shape": r.shape, "rel_err": r.rel_err} for r in v.probe_shapes],
        "log_tail": v.log_tail[-600:] if not ok else "",
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / ".marathon" / "bench" / "hostile_gpu.json"))
    ap.add_argument("--budget", type=float, default=200.0, help="seconds; later items are skipped")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the plumbing (with --only)")
    ap.add_argument("--only", default="", help="comma-separated item names to run (default: all)")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    only = set(filter(None, args.only.split(",")))

    def chosen(items):
        return [it for it in items if not only or it["name"] in only]
    t_start = time.monotonic()
    report = {"host": platform.node(), "python": platform.python_version(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "fence_fallback": [], "results": [], "skipped": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        report["elapsed_s"] = round(time.monotonic() - t_start, 1)
        report["passed"] = sum(r["pass"] for r in report["results"])
        report["failed"] = [r["name"] for r in report["results"] if not r["pass"]]
        out.write_text(json.dumps(report, indent=1))

    def left() -> float:
        return args.budget - (time.monotonic() - t_start)

    def record(result: dict) -> None:
        report["results"].append(result)
        print(f"[{time.monotonic() - t_start:6.1f}s] {result['name']}: {result['status']} "
              f"(expected {result['expect']}) {'PASS' if result['pass'] else 'FAIL'} {result.get('wall_s')}s", flush=True)
        save()

    # 1. the fences must not break honest work here; fall back one fence at a time if they do
    fence_env: dict[str, str] = {}
    for fallback in ({}, {"MARATHON_SANDBOX_SECCOMP": "0"}, {"MARATHON_SANDBOX_LANDLOCK": "0"},
                     {"MARATHON_SANDBOX_NETNS": "0"}):
        fence_env.update(fallback)
        result = run_judge(CONTROL, fence_env)
        result["fence_env"] = dict(fence_env)
        record(result)
        if result["pass"]:
            break
        report["fence_fallback"].append({"disabled": dict(fence_env), "because": result.get("reason") or result.get("error")})
    report["fence_env"] = fence_env

    def guarded(it):
        need = it["timeout"] * 0.25 + 30
        if left() < need:  # said at once: a budget that skips what was asked for should be seen
            print(f"skipped {it['name']}: it needs {need:.0f} s of the budget, {left():.0f} s left", flush=True)
            report["skipped"].append(it["name"])
            return None
        return run_judge(it, fence_env)

    # 2. the honest fast kernels first, one at a time: the fences and checks must not reject them
    for it in chosen(HONEST[:2]):
        result = guarded(it)
        if result:
            record(result)

    # 3. hostile candidates, several judges at a time
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        for result in pool.map(guarded, chosen(HOSTILE_ITEMS)):
            if result:
                record(result)

    # 4. the GPU memory bomb alone, then the next evaluation
    for it in chosen(BOMB):
        result = guarded(it)
        if result:
            record(result)

    # 5. the starters with timing, one at a time (timings are not disturbed by other judges)
    for it in chosen(HONEST[2:]):
        result = guarded(it)
        if result:
            record(result)
    save()
    print(json.dumps({"passed": report["passed"], "failed": report["failed"], "skipped": report["skipped"],
                      "fence_env": fence_env, "elapsed_s": report["elapsed_s"]}))
    return 0 if not report["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
