"""MLA decode on a GPU: tune the `tuned` kernel's CONFIG, then judge starter and tuned with `marathon eval`.

    python bench/mla_decode.py tune  [--out DIR]                 # sweep CONFIGs with do_bench, pick one
    python bench/mla_decode.py eval  [--kernel tuned --kernel starter] [--set headline --set sweep]
                                     [--config JSON | --best-from DIR/mla_decode_tune.json]
    python bench/mla_decode.py all   [--out DIR] [--budget-s 220]  # tune, then eval with the pick

`tune` is quick: it imports the kernel module in this process, rewrites its CONFIG dict, checks each
configuration against the fp32 reference and times it with triton.testing.do_bench (L2 cleared before
every call, median). Stage-1 variants are compiled first in parallel worker processes, which fill
Triton's on-disk cache for the timing loop. `eval` goes through kernels.evaluator.evaluate, exactly
like `marathon eval` (sandbox, 3 fresh seeds, L2 flush, baselines in the same run, CUDA graph figure);
the tuned source is the shipped file with its CONFIG literal replaced (kernels.tunables.with_config).

Shape sets: `bench` (B=1,H=64,S=8192), `extra` (B=32,H=128,S=8192: the memory-bound regime),
`headline` (both, in one evaluation) and `sweep` (the problem's sweep).

Writes to --out: mla_decode_<kernel>_<set>.json (the raw verdict, exactly `marathon eval --json`,
under "verdict", with the host facts beside it), mla_decode_tune.json, and mla_decode_summary.json
(GPU, driver, torch, triton; per kernel and shape: latency, CUDA-graph latency, % of the roofline
floor, achieved HBM bandwidth = min bytes / latency and its share of the 4.3 TB/s measured peak)."""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.evaluator import EvalRequest, evaluate, request_for  # noqa: E402
from kernels.problem import get_problem  # noqa: E402
from kernels.tunables import read_tunables, with_config  # noqa: E402

PROBLEM = "mla_decode"
PEAK_HBM = 4.3e12  # bytes/s: a device-to-device copy on this workplace's H200s (kernels/roofline.py)
BENCH = {"B": 1, "H": 64, "S": 8192}
EXTRA = {"B": 32, "H": 128, "S": 8192}
SETS = {"bench": [BENCH], "extra": [EXTRA], "headline": [BENCH, EXTRA],
        "tiny": [{"B": 1, "H": 4, "S": 100}, {"B": 2, "H": 3, "S": 37}]}  # tiny: a dry run on the CPU
TUNED_PATH = ROOT / "kernels" / "mla_decode" / "tuned.py"

# Stage-1 variants worth timing: (BLOCK_H, BLOCK_N, num_warps, num_stages). Pruned ahead of time by
# compiling every combination for sm_90 on a CPU host (triton.compile + cuobjdump): BLOCK_H=64 with 4
# warps, and BLOCK_H=32 with BLOCK_N=64 and 4 warps, spill registers to local memory; 64x64 with 3
# stages needs 288 KB of shared memory. BLOCK_H=64 is the one that gets wgmma (HGMMA).
STAGE1 = [
    (64, 16, 8, 2), (64, 16, 8, 3), (64, 32, 8, 2), (64, 32, 8, 3), (64, 64, 8, 2),
    (32, 16, 8, 2), (32, 32, 8, 2), (32, 32, 8, 3), (32, 64, 8, 2), (32, 16, 4, 2), (32, 32, 4, 2),
    (16, 16, 4, 2), (16, 32, 4, 2), (16, 32, 4, 3), (16, 32, 8, 2), (16, 64, 8, 2), (16, 64, 8, 3),
]
SPLIT_WAVES = (0.25, 0.5, 1, 2)
MERGE_VARIANTS = ((128, 4), (64, 2), (256, 4), (512, 8))  # (MERGE_BLOCK_D, MERGE_WARPS)


def base_config() -> dict:
    return dict(read_tunables(TUNED_PATH.read_text())[1])


def candidate_configs() -> list[dict]:
    out = []
    for (bh, bn, nw, ns), waves in itertools.product(STAGE1, SPLIT_WAVES):
        cfg = base_config()
        cfg.update(BLOCK_H=bh, BLOCK_N=bn, num_warps=nw, num_stages=ns, NUM_SPLITS="auto", SPLIT_WAVES=waves)
        out.append(cfg)
    return out


def host_facts() -> dict:
    import torch
    import triton
    driver = None
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "driver": driver,
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "host": platform.node(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# ---------------------------------------------------------------------------------------------- tune

def _load_tuned():
    import importlib
    return importlib.import_module("kernels.mla_decode.tuned")


def _inputs(shape: dict, seed: int = 0, device: str = "cuda"):
    import torch
    from kernels.mla_decode.reference import make_inputs
    return make_inputs(shape, seed, device, torch.bfloat16 if device == "cuda" else torch.float16)


def _bench_us(fn, device: str) -> float:
    """Median microseconds of fn: do_bench on the GPU (L2 cleared before each call), a wall clock off it."""
    import statistics
    import triton
    if device == "cuda":
        return 1e3 * triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append(1e6 * (time.perf_counter() - t0))
    return statistics.median(times)


def _warm(job: tuple[dict, list[dict], str]) -> str | None:
    """In a worker process: run one configuration once per shape, which compiles its kernels into
    Triton's on-disk cache. Returns an error text or None."""
    cfg, shapes, device = job
    try:
        import torch
        mod = _load_tuned()
        mod.CONFIG.clear()
        mod.CONFIG.update(cfg)
        for shape in shapes:
            mod.mla_decode(**_inputs(shape, device=device))
        if device == "cuda":
            torch.cuda.synchronize()
        return None
    except Exception as exc:  # a configuration that does not fit is an answer, not a crash
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def tune(shapes: list[dict], out_dir: Path, workers: int = 8, deadline: float | None = None,
         device: str = "cuda", limit: int | None = None, refine: int = 4) -> dict:
    import torch
    from kernels.mla_decode.reference import reference

    configs = candidate_configs()[:limit]
    t0 = time.time()
    # compile: one job per stage-1 variant (the split heuristic's knobs share its kernels), in parallel
    by_stage1: dict[tuple, dict] = {}
    for cfg in configs:
        key = (cfg["BLOCK_H"], cfg["BLOCK_N"], cfg["num_warps"], cfg["num_stages"])
        by_stage1.setdefault(key, cfg)
    jobs = []
    for cfg in by_stage1.values():  # every split count class: one split (direct) and several
        for waves in (min(SPLIT_WAVES), max(SPLIT_WAVES)):
            jobs.append(({**cfg, "SPLIT_WAVES": waves}, shapes, device))
    import multiprocessing as mp
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        warm_errors = list(pool.map(_warm, jobs))
    broken = {}
    for (cfg, _, _), err in zip(jobs, warm_errors):
        if err:
            broken[(cfg["BLOCK_H"], cfg["BLOCK_N"], cfg["num_warps"], cfg["num_stages"])] = err
    print(f"compiled {len(jobs)} variants in {time.time() - t0:.0f} s; {len(broken)} stage-1 variants failed",
          flush=True)

    mod = _load_tuned()
    spec = get_problem(PROBLEM)
    data = []
    for shape in shapes:
        inp = _inputs(shape, seed=1, device=device)
        data.append((shape, inp, reference(**inp)))
    def measure(cfg: dict) -> dict:
        key = (cfg["BLOCK_H"], cfg["BLOCK_N"], cfg["num_warps"], cfg["num_stages"])
        row = {"config": cfg, "results": []}
        if key in broken:
            row["error"] = broken[key]
            return row
        mod.CONFIG.clear()
        mod.CONFIG.update(cfg)
        for shape, inp, ref in data:
            try:
                out = mod.mla_decode(**inp).float()
                rel = ((out - ref).norm() / ref.norm()).item()
                ok = bool(torch.isfinite(out).all()) and rel <= spec.tolerances[spec.dtypes[device]].rel
                us = _bench_us(lambda: mod.mla_decode(**inp), device)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                break
            floor_bytes = spec.traffic(shape, inp["q"].element_size()).min_bytes
            row["results"].append({"shape": shape, "rel_err": rel, "correct": ok, "us": us,
                                   "hbm_pct": 100 * floor_bytes / (us * 1e-6) / PEAK_HBM})
        print(_tune_line(row), flush=True)
        return row

    def ranked(rows: list[dict]) -> list[dict]:
        """Correct everywhere, then the smallest geometric mean of time / best time, per shape."""
        good = [r for r in rows if "error" not in r and len(r["results"]) == len(shapes)
                and all(x["correct"] for x in r["results"])]
        best_us = [min(r["results"][i]["us"] for r in good) for i in range(len(shapes))] if good else []
        for r in good:
            r["score"] = math.prod(x["us"] / b for x, b in zip(r["results"], best_us)) ** (1 / len(shapes))
        return sorted(good, key=lambda r: r["score"])

    # phase 1: stage-1 tiles, warps, stages and split counts
    rows = []
    for cfg in configs:
        if deadline and time.time() > deadline:
            print("tune: out of time budget; stopping early", flush=True)
            break
        rows.append(measure(cfg))
    # phase 2: around the leaders, the merge kernel's shape and the programmatic dependent launch
    seen = {json.dumps(r["config"], sort_keys=True) for r in rows}
    for lead in [r["config"] for r in ranked(rows)[:refine]]:
        for pdl, (block_d, warps) in itertools.product((False, True), MERGE_VARIANTS):
            cfg = {**lead, "PDL": pdl, "MERGE_BLOCK_D": block_d, "MERGE_WARPS": warps}
            if json.dumps(cfg, sort_keys=True) in seen or (deadline and time.time() > deadline):
                continue
            seen.add(json.dumps(cfg, sort_keys=True))
            rows.append(measure(cfg))
    scored = ranked(rows)
    result = {"shapes": shapes, "host": host_facts(), "rows": rows,
              "best": scored[0]["config"] if scored else None,
              "best_per_shape": {json.dumps(s): min(scored, key=lambda r: r["results"][i]["us"])["config"]
                                 for i, s in enumerate(shapes)} if scored else {},
              "elapsed_s": round(time.time() - t0, 1)}
    (out_dir / "mla_decode_tune.json").write_text(json.dumps(result, indent=1))
    print("\ntop configurations (score = geometric mean of time / best time per shape):")
    for row in scored[:8]:
        print(f"  {row['score']:.3f}  " + _tune_line(row))
    return result


def _tune_line(row: dict) -> str:
    c = row["config"]
    head = (f"H{c['BLOCK_H']:<3}N{c['BLOCK_N']:<3}w{c['num_warps']} s{c['num_stages']} waves {c['SPLIT_WAVES']:<4} "
            f"m{c['MERGE_BLOCK_D']}/{c['MERGE_WARPS']}{' pdl' if c['PDL'] else ''}")
    if "error" in row:
        return head + " ERROR " + row["error"][:120]
    return head + " | " + " | ".join(
        f"{r['shape']['B']}x{r['shape']['H']}x{r['shape']['S']}: {r['us']:8.2f} us {r['hbm_pct']:5.1f}% HBM"
        + ("" if r["correct"] else f" WRONG rel {r['rel_err']:.2e}") for r in row["results"])


# ---------------------------------------------------------------------------------------------- eval

def eval_kernel(kernel: str, set_name: str, out_dir: Path, config: dict | None, baselines: bool,
                timeout_s: float, device: str = "cuda") -> dict:
    if set_name in SETS:
        req = request_for(PROBLEM, kernel, device=device, shapes=SETS[set_name], timeout_s=timeout_s,
                          baselines=baselines)
    else:
        req = request_for(PROBLEM, kernel, device=device, shape_set=set_name, timeout_s=timeout_s,
                          baselines=baselines)
    if config is not None and kernel == "tuned":
        req = EvalRequest(**{**req.model_dump(), "source": with_config(req.source, config)})
    t0 = time.time()
    verdict = evaluate(req)
    record = {"verdict": json.loads(verdict.model_dump_json()), "config": config if kernel == "tuned" else None,
              "host": platform.node(), "command": " ".join(sys.argv), "wall_s": round(time.time() - t0, 1),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out_dir / f"{PROBLEM}_{kernel}_{set_name}.json").write_text(json.dumps(record, indent=2))
    print(f"{kernel} / {set_name}: {verdict.status} ({record['wall_s']} s): {verdict.reason[:400]}", flush=True)
    for f in verdict.flags:
        print("  flag:", f)
    return record


def summarize(records: list[dict], tune_result: dict | None, out_dir: Path, show: bool = True) -> None:
    spec = get_problem(PROBLEM)
    table = []
    for rec in records:
        v = rec["verdict"]
        for r in v["shapes"]:
            row = {"kernel": v["kernel"], "status": v["status"], "shape": r["shape"], "correct": r["correct"],
                   "rel_err": r["rel_err"], "latency_us": r["latency_us"],
                   "graph_us": (r.get("timing") or {}).get("graph_median_us"),
                   "floor_us": r.get("floor_us"), "roofline_pct": r.get("roofline_pct"),
                   "baselines_us": r.get("baselines"), "speedup": r.get("speedup")}
            if r["latency_us"] and v["timing_meaningful"]:
                min_bytes = spec.traffic(r["shape"], 2).min_bytes
                row["hbm_tb_s"] = round(min_bytes / (r["latency_us"] * 1e-6) / 1e12, 3)
                row["hbm_pct_of_4.3"] = round(100 * min_bytes / (r["latency_us"] * 1e-6) / PEAK_HBM, 1)
            table.append(row)
    summary = {"host": host_facts(), "config": next((r["config"] for r in records if r.get("config")), None),
               "table": table, "tune_best": tune_result["best"] if tune_result else None}
    (out_dir / f"{PROBLEM}_summary.json").write_text(json.dumps(summary, indent=1))
    if not show:
        return
    h = summary["host"]
    print(f"\n{h['gpu']}, driver {h['driver']}, torch {h['torch']}, triton {h['triton']}")
    print(f"{'kernel':<8} {'shape':<18} {'ok':<3} {'us':>9} {'graph us':>9} {'roof%':>6} {'TB/s':>6} {'%4.3':>5}  baselines")
    for row in table:
        s = row["shape"]
        base = " ".join(f"{k} {u:.1f}us" for k, u in (row["baselines_us"] or {}).items())
        def fmt(x, f):
            return f.format(x) if x is not None else f.format(float("nan")).replace("nan", "  -")
        print(f"{row['kernel']:<8} {s['B']}x{s['H']}x{s['S']:<12} {'yes' if row['correct'] else 'no':<3} "
              f"{fmt(row['latency_us'], '{:9.2f}')} {fmt(row['graph_us'], '{:9.2f}')} "
              f"{fmt(row['roofline_pct'], '{:6.1f}')} {fmt(row.get('hbm_tb_s'), '{:6.2f}')} "
              f"{fmt(row.get('hbm_pct_of_4.3'), '{:5.1f}')}  {base}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("tune", "eval", "all"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--kernel", action="append", default=None, help="eval: starter and/or tuned (default both)")
    ap.add_argument("--set", action="append", default=None,
                    help="eval: bench, extra, headline, sweep (default headline)")
    ap.add_argument("--config", default=None, help="eval: a JSON CONFIG for tuned instead of the file's")
    ap.add_argument("--best-from", default=None, help="eval: take tuned's CONFIG from a mla_decode_tune.json")
    ap.add_argument("--no-baselines", action="append", default=[], metavar="KERNEL",
                    help="eval: skip the baselines for this kernel's evaluations (repeatable)")
    ap.add_argument("--tune-shapes", default="headline", choices=tuple(SETS))
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a dry run of the script itself in the Triton interpreter")
    ap.add_argument("--limit", type=int, default=None, help="tune: only the first N configurations")
    ap.add_argument("--refine", type=int, default=4, help="tune: leaders whose merge and PDL are varied")
    ap.add_argument("--budget-s", type=float, default=None, help="all: stop starting new steps after this")
    ap.add_argument("--timeout", type=float, default=300.0, help="eval: the candidate's wall-clock limit")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    deadline = start + args.budget_s if args.budget_s else None
    if args.device == "cpu":  # before the kernel module is imported: triton.jit reads it then
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ.setdefault("MARATHON_TRITON_CACHE", os.environ.get("TRITON_CACHE_DIR", "/tmp/marathon-triton-cache"))

    tune_result = None
    config = json.loads(args.config) if args.config else None
    if args.best_from:
        config = json.loads(Path(args.best_from).read_text())["best"]
    if args.mode in ("tune", "all"):
        tune_deadline = start + 0.5 * args.budget_s if args.budget_s else None
        tune_result = tune(SETS[args.tune_shapes], out_dir, args.workers, tune_deadline, args.device, args.limit,
                           args.refine)
        if args.mode == "tune":
            return 0 if tune_result["best"] else 1
        config = tune_result["best"] or config
    kernels = args.kernel or ["tuned", "starter"]
    sets = args.set or ["headline"]
    records = []
    for set_name in sets:
        for kernel in kernels:
            if deadline and time.time() > deadline:
                print(f"skipping {kernel} / {set_name}: out of time budget", flush=True)
                continue
            records.append(eval_kernel(kernel, set_name, out_dir, config, kernel not in args.no_baselines,
                                       args.timeout, args.device))
            summarize(records, tune_result, out_dir, show=False)  # after each, so a kill keeps the rest
    if records:
        summarize(records, tune_result, out_dir)
    return 0 if records and all(r["verdict"]["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
