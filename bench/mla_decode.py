"""MLA decode on a GPU: tune the `tuned` kernel's CONFIG, then judge it (and the starter) with `marathon eval`.

    python bench/mla_decode.py tune  [--out DIR]                 # sweep CONFIGs, pick one
    python bench/mla_decode.py eval  [--kernel tuned --kernel starter] [--set headline --set sweep]
                                     [--config JSON | --best-from DIR/mla_decode_tune.json]
    python bench/mla_decode.py all   [--out DIR] [--budget-s 220]  # tune, then eval with the pick
    python bench/mla_decode.py breakdown [--out DIR] [--part streams|configs|scaling]  # B=1: whole call,
                                     # stage 1 alone, merge alone; stage 1's cache stream without its math
                                     # (STREAMS); the shipped stage 1 as S grows (SCALING_*)
    python bench/mla_decode.py plans [--out DIR]                 # PLAN_VARIANTS on every regime shape
    python bench/mla_decode.py pick [--out DIR] [--write]        # PICK_* regime variants on every regime
                                     # shape, then the plan rule scored against torch.compile's records

`tune` imports the kernel module in this process and rewrites its CONFIG dict. Each configuration is
checked against the fp32 reference and timed as a CUDA graph replayed after a 256 MB L2 flush (median
of 30): the GPU time alone. Eager timings at B=1 mostly measure the host (Python launch overhead
against the flush's duration), so they rank nothing; the tune prints them for the finalists only.
The launcher has two regimes (kernels/problems/mla_decode/tuned.py): the SMALL_* stage-1 keys are tuned on the
bench shape (B=1, H=64, S=8192), the plain keys on B=32, H=128, S=8192; then the merge kernel's shape
and the programmatic dependent launch are tuned on both. Stage-1 variants are compiled first in
parallel worker processes, which fill Triton's on-disk cache for the timing loop. A diagnosis of the
pick follows: stage 1 alone against the whole call, host time per call, two empty Triton launches,
and a device copy of the cache (a bandwidth yardstick), all timed the same way.

`eval` goes through kernels.evaluator.evaluate.evaluate, exactly like `marathon eval` (sandbox, 3 fresh seeds,
L2 flush, baselines in the same run, CUDA-graph figure); the tuned source is the shipped file with
its CONFIG literal replaced (kernels.problems.tunables.with_config) when a config is given.

Shape sets: `bench` (B=1,H=64,S=8192), `extra` (B=32,H=128,S=8192), `headline` (both, in one
evaluation) and `sweep` (the problem's sweep); `tiny` for a dry run on the CPU (--device cpu).

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
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from kernels.evaluator.evaluate import EvalRequest, evaluate, request_for  # noqa: E402
from kernels.evaluator.timing import compare  # noqa: E402
from kernels.evaluator.hostinfo import host_facts  # noqa: E402
from kernels.problems.spec import get_problem  # noqa: E402
from kernels.problems.tunables import read_tunables, with_config  # noqa: E402

PROBLEM = "mla_decode"
PEAK_HBM = 4.3e12  # bytes/s: a device-to-device copy measured on an H200 (kernels/evaluator/roofline.py)
BENCH = {"B": 1, "H": 64, "S": 8192}
EXTRA = {"B": 32, "H": 128, "S": 8192}
SETS = {"bench": [BENCH], "extra": [EXTRA], "headline": [BENCH, EXTRA],
        "tiny": [{"B": 1, "H": 4, "S": 100}, {"B": 2, "H": 3, "S": 37}]}  # tiny: a dry run on the CPU
TUNED_PATH = ROOT / "kernels" / "problems" / "mla_decode" / "tuned.py"

# Stage-1 variants worth timing: (BLOCK_H, BLOCK_N, num_warps, num_stages). Pruned ahead of time by
# compiling every combination for sm_90 on a CPU host (triton.compile + cuobjdump): BLOCK_H=64 with 4
# warps, BLOCK_H=32 with BLOCK_N=64 and 4 warps, and 64x128 tiles spill registers to local memory;
# 64x64 with 3 stages needs 288 KB of shared memory. BLOCK_H=64 is the one that gets wgmma (HGMMA).
STAGE1 = [
    (64, 64, 8, 2), (64, 32, 8, 2), (64, 32, 8, 3), (64, 32, 8, 4), (64, 16, 8, 2), (64, 16, 8, 3),
    (32, 16, 8, 2), (32, 32, 8, 2), (32, 32, 8, 3), (32, 64, 8, 2), (32, 32, 4, 2),
    (16, 16, 4, 2), (16, 32, 4, 2), (16, 32, 4, 3), (16, 32, 8, 2), (16, 64, 8, 2),
    # two 8-row MMA slices per warp instead of one: twice the independent chains, half the tiles
    # (the B=1 stage 1 looks latency-bound; kernels/problems/mla_decode/NOTES.md)
    (16, 64, 4, 2),
    # FORM "tokens" (cache rows as the products' M, so wgmma at any head block). Compiled for sm_90 on
    # a CPU host first (bench/sm90_resources.py): 64-row tiles take 168-229 KB of shared memory at 2
    # stages, 128-row tiles fit only at 1 stage. One stage is not offered: on the H200
    # (mla_decode_tune.json @bb2fa31) it gave wrong results at 16 heads and 4 warps and
    # an illegal memory access at 32 heads, after which the device's other contexts failed too
    (16, 64, 4, 2, "tokens"), (16, 64, 8, 2, "tokens"), (32, 64, 8, 2, "tokens"),
]
SPLIT_WAVES = (0.25, 0.5, 1, 2, 4)
MERGE_VARIANTS = ((128, 4), (64, 2), (256, 4), (512, 8))  # (MERGE_BLOCK_D, MERGE_WARPS)
# the regime each tuning shape exercises, and the prefix of the keys it reads
REGIMES = (("SMALL_", BENCH), ("", EXTRA))


def base_config() -> dict:
    return dict(read_tunables(TUNED_PATH.read_text())[1])


def stage1_config(base: dict, pre: str, variant: tuple, waves: float) -> dict:
    bh, bn, nw, ns, form = (*variant, "heads")[:5]
    return {**base, pre + "BLOCK_H": bh, pre + "BLOCK_N": bn, pre + "num_warps": nw, pre + "num_stages": ns,
            pre + "SPLIT_WAVES": waves, pre + "FORM": form, "NUM_SPLITS": "auto"}


# ---------------------------------------------------------------------------------------------- timing

def _inputs(shape: dict, seed: int = 0, device: str = "cuda"):
    import torch
    from kernels.problems.mla_decode.reference import make_inputs
    return make_inputs(shape, seed, device, torch.bfloat16 if device == "cuda" else torch.float16)


class Timer:
    """GPU time of a call, the L2 flushed before each: as a CUDA graph (the device alone) or eager
    (events around the Python call: the host's launch cost shows when it outlasts the flush)."""

    def __init__(self, device: str, reps: int = 30, flush: str = "read") -> None:
        from kernels.evaluator.timing import L2Flush
        self.device, self.reps = device, reps
        self.flush = L2Flush(device, flush) if device == "cuda" else None

    def _events(self, launch) -> float:
        from kernels.evaluator.timing import median_event_us
        return median_event_us(launch, self.flush, self.reps)

    def graph_us(self, fn) -> float:
        if self.device != "cuda":
            return self.host_us(fn)
        from kernels.evaluator.timing import captured
        return self._events(captured(fn).replay)

    def eager_us(self, fn) -> float:
        if self.device != "cuda":
            return self.host_us(fn)
        fn()
        return self._events(fn)

    def host_us(self, fn, calls: int = 200) -> float:
        """Wall time per call of `calls` calls in a row (the queue absorbs the GPU work when the GPU
        is faster than the host): the host's cost of one call."""
        import torch
        fn()
        if self.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls if self.device == "cuda" else 3):
            fn()
        if self.device == "cuda":
            torch.cuda.synchronize()
        return 1e6 * (time.perf_counter() - t0) / (calls if self.device == "cuda" else 3)


# ---------------------------------------------------------------------------------------------- tune

def _load_tuned():
    import importlib
    return importlib.import_module("kernels.problems.mla_decode.tuned")


def _warm(job: tuple[list[dict], dict, str]) -> str | None:
    """In a worker process: run configurations once on a shape, which compiles their kernels into
    Triton's on-disk cache. Returns an error text or None."""
    configs, shape, device = job
    try:
        import torch
        mod = _load_tuned()
        inp = _inputs(shape, device=device)
        for cfg in configs:
            mod.CONFIG.clear()
            mod.CONFIG.update(cfg)
            mod.mla_decode(**inp)
        if device == "cuda":
            torch.cuda.synchronize()
        return None
    except Exception as exc:  # a configuration that does not fit is an answer, not a crash
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


class _SkipMerge:
    """Stands in for the merge kernel, to time stage 1 alone (the output is then wrong, on purpose)."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def tune(out_dir: Path, workers: int = 8, deadline: float | None = None, device: str = "cuda",
         limit: int | None = None, finalists: int = 2, flush: str = "read") -> dict:
    import multiprocessing as mp

    import torch
    from kernels.problems.mla_decode.reference import reference

    regimes = REGIMES if device == "cuda" else (("SMALL_", SETS["tiny"][0]), ("", SETS["tiny"][1]))
    base = base_config()
    if device == "cpu":  # the dry run: every tiny shape in the regime it is tuned for
        base["SMALL_BELOW"] = 2
    variants = STAGE1[:limit]
    t0 = time.time()
    keys = [(pre, v) for pre, _ in regimes for v in variants]
    jobs = [([stage1_config(base, pre, v, w) for w in SPLIT_WAVES], shape, device)
            for pre, shape in regimes for v in variants]
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        warm_errors = list(pool.map(_warm, jobs))
    broken = {key: err for key, err in zip(keys, warm_errors) if err}
    print(f"compiled {len(jobs)} stage-1 variant x shape jobs in {time.time() - t0:.0f} s; "
          f"{len(broken)} failed: {sorted(set(broken.values()))[:3]}", flush=True)

    mod = _load_tuned()
    spec = get_problem(PROBLEM)
    timer = Timer(device, flush=flush)
    data = {}
    for _, shape in regimes:
        inp = _inputs(shape, seed=1, device=device)
        data[json.dumps(shape)] = (shape, inp, reference(**inp))

    def measure(cfg: dict, shapes: list[dict], eager: bool = False) -> dict:
        row = {"config": cfg, "results": []}
        mod.CONFIG.clear()
        mod.CONFIG.update(cfg)
        for shape in shapes:
            _, inp, ref = data[json.dumps(shape)]
            try:
                out = mod.mla_decode(**inp).float()
                rel = compare(out, ref)[0]
                ok = bool(torch.isfinite(out).all()) and rel <= spec.tolerances[spec.dtypes[device]].rel
                call = lambda: mod.mla_decode(**inp)  # noqa: E731
                res = {"shape": shape, "rel_err": rel, "correct": ok, "graph_us": timer.graph_us(call)}
                if eager:
                    res["eager_us"] = timer.eager_us(call)
                    res["host_us"] = timer.host_us(call)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                break
            floor_bytes = spec.traffic(shape, inp["q"].element_size()).min_bytes
            res["hbm_pct"] = 100 * floor_bytes / (res["graph_us"] * 1e-6) / PEAK_HBM
            row["results"].append(res)
        print(_tune_line(row), flush=True)
        return row

    def ranked(rows: list[dict], n_shapes: int) -> list[dict]:
        """Correct everywhere, then the smallest geometric mean of graph time / best graph time."""
        good = [r for r in rows if "error" not in r and len(r["results"]) == n_shapes
                and all(x["correct"] for x in r["results"])]
        best = [min(r["results"][i]["graph_us"] for r in good) for i in range(n_shapes)] if good else []
        for r in good:
            r["score"] = math.prod(x["graph_us"] / b for x, b in zip(r["results"], best)) ** (1 / n_shapes)
        return sorted(good, key=lambda r: r["score"])

    # phase 1: each regime's stage-1 tiles, warps, stages and split counts, on its own shape
    phase1: dict[str, list[dict]] = {}
    for pre, shape in regimes:
        rows = phase1[pre] = []
        for v, w in itertools.product(variants, SPLIT_WAVES):
            if deadline and time.time() > deadline:
                print("tune: out of time budget; stopping early", flush=True)
                break
            cfg = stage1_config(base, pre, v, w)
            if (pre, v) in broken:
                rows.append({"config": cfg, "results": [], "error": broken[(pre, v)]})
                continue
            rows.append(measure(cfg, [shape]))
    leaders = {pre: [r["config"] for r in ranked(rows, 1)[:finalists]] for pre, rows in phase1.items()}
    regime_keys = {pre: [pre + k for k in ("BLOCK_H", "BLOCK_N", "num_warps", "num_stages", "SPLIT_WAVES", "FORM")]
                   for pre, _ in regimes}

    # phase 2: the regimes' leaders combined, with the merge kernel's shape and PDL, on both shapes
    shapes = [shape for _, shape in regimes]
    phase2 = []
    small, large = leaders.get("SMALL_", []), leaders.get("", [])
    for s_cfg, l_cfg in itertools.product(small or [base], large or [base]):
        for pdl, (block_d, warps) in itertools.product((False, True), MERGE_VARIANTS):
            if deadline and time.time() > deadline:
                break
            cfg = {**base, **{k: s_cfg[k] for k in regime_keys["SMALL_"]},
                   **{k: l_cfg[k] for k in regime_keys[""]},
                   "PDL": pdl, "MERGE_BLOCK_D": block_d, "MERGE_WARPS": warps}
            phase2.append(measure(cfg, shapes))
    scored = ranked(phase2, len(shapes))
    best = scored[0]["config"] if scored else None

    # the pick, eager as well, and where its time goes
    diag = {}
    if best is not None:
        print("\nthe pick, eager and host time as well:", flush=True)
        final = measure(best, shapes, eager=True)
        try:
            diag = diagnose(mod, best, data, shapes, timer)
        except Exception as exc:  # a yardstick that fails must not cost the pick
            diag = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    else:
        final = None
    result = {"shapes": shapes, "host": host_facts(), "flush": flush, "phase1": phase1, "phase2": phase2,
              "best": best, "best_row": final, "diagnosis": diag, "elapsed_s": round(time.time() - t0, 1)}
    (out_dir / "mla_decode_tune.json").write_text(json.dumps(result, indent=1))
    print("\nphase 1 leaders (graph us on the regime's shape):")
    for pre, rows in phase1.items():
        for row in ranked(rows, 1)[:5]:
            print(f"  {pre or 'LARGE_'}: " + _tune_line(row))
    print("phase 2 top (score = geometric mean of graph time / best graph time per shape):")
    for row in scored[:6]:
        print(f"  {row['score']:.3f}  " + _tune_line(row))
    print("pick:", json.dumps(best))
    print("diagnosis:", json.dumps(diag))
    return result


def diagnose(mod, cfg: dict, data: dict, shapes: list[dict], timer: Timer) -> dict:
    """Where the pick's time goes, each figure a CUDA graph after an L2 flush unless named host."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _empty(x_ptr):
        pass

    out = {}
    x = torch.empty(16, device=timer.device)
    out["two_empty_launches_graph_us"] = timer.graph_us(lambda: (_empty[(1,)](x), _empty[(1,)](x)))
    out["two_empty_launches_eager_us"] = timer.eager_us(lambda: (_empty[(1,)](x), _empty[(1,)](x)))
    out["two_empty_launches_host_us"] = timer.host_us(lambda: (_empty[(1,)](x), _empty[(1,)](x)))
    mod.CONFIG.clear()
    mod.CONFIG.update(cfg)
    for shape in shapes:
        _, inp, _ = data[json.dumps(shape)]
        tag = f"{shape['B']}x{shape['H']}x{shape['S']}"
        kv = inp["kv"]
        out[f"{tag}_kv_copy_graph_us"] = timer.graph_us(lambda: kv.clone())  # reads and writes kv once
        out[f"{tag}_whole_graph_us"] = timer.graph_us(lambda: mod.mla_decode(**inp))
        merge = mod._mla_merge_kernel
        mod._mla_merge_kernel = _SkipMerge()
        try:
            out[f"{tag}_stage1_only_graph_us"] = timer.graph_us(lambda: mod.mla_decode(**inp))
        finally:
            mod._mla_merge_kernel = merge
        out[f"{tag}_host_us"] = timer.host_us(lambda: mod.mla_decode(**inp))
    return {k: round(v, 2) for k, v in out.items()}


def study(out_dir: Path, device: str = "cuda") -> dict:
    """What the L2 flush itself costs a timed call: the same yardsticks and kernels timed after a
    read flush (clean L2, what kernels/evaluator/timing.py does) and after a write flush (dirty L2, what it did
    before 2026-12-02 and what triton.testing.do_bench does). CUDA graphs, median of 30."""
    import torch
    import triton
    from kernels.problems.mla_decode import baselines

    @triton.jit
    def _empty(x_ptr):
        pass

    mod = _load_tuned()
    mod.CONFIG.clear()
    mod.CONFIG.update(base_config())
    x = torch.empty(16, device=device)
    timers = {mode: Timer(device, flush=mode) for mode in ("read", "write")}  # one flush buffer each
    rows: dict[str, dict] = {}
    for shape in (BENCH, EXTRA):
        inp = _inputs(shape, seed=1, device=device)
        kv = inp["kv"]
        tag = f"{shape['B']}x{shape['H']}x{shape['S']}"
        calls = {
            "one_empty_launch": lambda: _empty[(1,)](x),
            "two_empty_launches": lambda: (_empty[(1,)](x), _empty[(1,)](x)),
            f"{tag}_kv_read (sum)": lambda: kv.sum(),
            f"{tag}_kv_copy (clone)": lambda: kv.clone(),
            f"{tag}_tuned": lambda: mod.mla_decode(**inp),
        }
        for name, fn in baselines.baselines(device).items():
            calls[f"{tag}_{name}"] = (lambda fn=fn: fn(**inp))
        for name, fn in calls.items():
            if name in rows:
                continue
            rows[name] = {}
            for mode, timer in timers.items():
                try:
                    rows[name][mode] = round(timer.graph_us(fn), 2)
                except Exception as exc:  # a yardstick that cannot be captured is reported, not fatal
                    rows[name][mode] = f"{type(exc).__name__}: {str(exc)[:120]}"
            print(f"  {name:<32} read flush {rows[name]['read']!s:>9} us   write flush {rows[name]['write']!s:>9} us",
                  flush=True)
        del inp, kv
    result = {"host": host_facts(), "config": base_config(), "graph_us_by_flush": rows}
    (out_dir / "bench/results/h200/mla_decode_tuned_flush_study.json").write_text(json.dumps(result, indent=1))
    return result


# (stage-1 variant, SPLIT_WAVES, other keys) whose time the breakdown splits between the two kernels,
# at B=1: the forms, head blocks and split counts (mla_decode_breakdown.json @bb2fa31). A
# stage-1 L2 prefetch and bf16 workspaces timed the same way were both slower whole calls, their code gone
# (mla_decode_configs.json @e82139e, mla_decode_configs.json @ff80c1b)
BREAKDOWN = [((16, 32, 4, 3), 0.5, {}), ((16, 32, 4, 3), 1, {}), ((16, 32, 4, 3), 2, {}), ((16, 64, 4, 2), 1, {}),
             ((16, 64, 4, 2), 2, {}), ((16, 64, 4, 2, "tokens"), 0.5, {}), ((16, 64, 4, 2, "tokens"), 1, {}),
             ((16, 64, 4, 2, "tokens"), 2, {}), ((32, 64, 8, 2, "tokens"), 1, {}), ((64, 64, 8, 2), 0.5, {}),
             ((64, 64, 8, 2), 1, {})]


# stage 1's grid and tile stream without its math: (head blocks, splits, BLOCK_N, warps, stages) at B=1,
# S=8192; what stage 1 cannot beat at that grid however its products are formed
STREAMS = [(4, 32, 32, 4, 3), (4, 32, 64, 4, 2), (4, 64, 32, 4, 3), (1, 32, 64, 8, 2), (1, 64, 64, 8, 2),
           (1, 128, 64, 8, 2), (1, 132, 64, 4, 2), (4, 16, 32, 4, 3)]


def stream_yardsticks(timer: "Timer", kv, device: str, grids: list = STREAMS) -> list[dict]:
    """CUDA-graph time (L2 flushed) of a kernel that streams the cache exactly like stage 1 (same
    grid, tiles, warps and software pipeline) but only sums the tiles, one float out per program."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _stream(kv_ptr, out_ptr, S, split_len, D_LAT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_N: tl.constexpr):
        D_QK: tl.constexpr = D_LAT + D_ROPE
        split = tl.program_id(1)
        start = split * split_len
        end = tl.minimum(start + split_len, S)
        offs_t = tl.arange(0, BLOCK_N)
        offs_c = tl.arange(0, D_LAT)
        offs_r = tl.arange(0, D_ROPE)
        # a running element-wise max in the cache's dtype: the cheapest use of every loaded element
        acc = tl.full([BLOCK_N, D_LAT], float("-inf"), dtype=kv_ptr.dtype.element_ty)
        acc_r = tl.full([BLOCK_N, D_ROPE], float("-inf"), dtype=kv_ptr.dtype.element_ty)
        for n0 in range(start, end, BLOCK_N):
            rows = kv_ptr + (n0 + offs_t[:, None]).to(tl.int64) * D_QK
            ok = (n0 + offs_t < end)[:, None]
            # (the casts keep the loop-carried type: Triton computes a bf16 maximum in fp32)
            acc = tl.maximum(acc, tl.load(rows + offs_c[None, :], mask=ok, other=0.0)).to(acc.dtype)
            acc_r = tl.maximum(acc_r, tl.load(rows + D_LAT + offs_r[None, :], mask=ok, other=0.0)).to(acc_r.dtype)
        total = tl.max(tl.max(acc.to(tl.float32), axis=1), axis=0) + tl.max(tl.max(acc_r.to(tl.float32), axis=1), axis=0)
        tl.store(out_ptr + tl.program_id(1) * tl.num_programs(0) + tl.program_id(0), total)

    S = kv.shape[1]
    rows = []
    for n_hb, splits, block_n, warps, stages in grids:
        split_len = triton.cdiv(triton.cdiv(S, splits), block_n) * block_n
        out = torch.empty(n_hb * splits, device=kv.device, dtype=torch.float32)
        def launch(n_hb=n_hb, splits=splits, split_len=split_len, block_n=block_n, warps=warps, stages=stages, out=out):
            _stream[(n_hb, triton.cdiv(S, split_len))](kv, out, S, split_len, D_LAT=512, D_ROPE=64, BLOCK_N=block_n,
                                                       num_warps=warps, num_stages=stages)
        row = {"head_blocks": n_hb, "splits": splits, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
        try:
            row["graph_us"] = round(timer.graph_us(launch), 2)
        except Exception as exc:  # Triton states the reason of a CompilationError on its last line
            row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else ''}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


SCALING_SPLITS = (32, 64)
SCALING_S = (1024, 2048, 4096, 8192, 16384, 32768)


def _split_times(mod, timer: "Timer", cfg: dict, shape: dict, inp: dict, ref, row: dict) -> dict:
    """One breakdown row: the relative error against `ref` (the reference on `inp`), then the whole
    call, stage 1 alone (the merge skipped) and the merge alone (stage 1 skipped: the merge then reads
    the workspace an earlier call left, which is what it reads anyway, so its time is honest though
    the output is not)."""
    mod.CONFIG.clear()
    mod.CONFIG.update(cfg)
    try:
        out = mod.mla_decode(**inp).float()
        row["rel_err"] = compare(out, ref)[0]
        call = lambda: mod.mla_decode(**inp)  # noqa: E731
        row["whole_graph_us"] = timer.graph_us(call)
        for skip, names in (("stage1_only", ("_mla_merge_kernel",)), ("merge_only", ("_mla_split_kernel",))):
            saved = {n: getattr(mod, n) for n in names}
            for n in names:
                setattr(mod, n, _SkipMerge())
            try:
                row[f"{skip}_graph_us"] = timer.graph_us(call)
            finally:
                for n, k in saved.items():
                    setattr(mod, n, k)
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    pre, *_, row["splits"], _ = mod.plan(shape["B"], shape["H"], shape["S"])
    part_bytes = 2 if mod.CONFIG.get(pre + "WORKSPACE") == "input" else 4  # bf16 inputs on the GPU
    row["workspace_mb"] = round(shape["H"] * row["splits"] * (mod.D_LATENT * part_bytes + 4) / 1e6, 2)
    return row


# "width": at B=1, H=64, S=8192, the cache stream alone and stage 1 with its merge at grids of up to
# ~1,000 programs: (head blocks, splits, BLOCK_N, warps, stages) for the stream; (stage-1 variant,
# NUM_SPLITS) for the kernel, partial outputs in bf16. What a stage 1 that wide costs in its merge
WIDTH_STREAMS = [(1, 1024, 8, 4, 1), (1, 256, 32, 4, 1), (1, 128, 64, 8, 1), (4, 256, 32, 4, 1), (4, 32, 32, 4, 3)]
WIDTH_CONFIGS = [((16, 32, 4, 3), 32), ((16, 32, 4, 3), 128), ((16, 32, 4, 3), 256), ((32, 32, 8, 2), 256),
                 ((64, 16, 8, 2), 512), ((64, 64, 8, 2), 128)]
BREAKDOWN_PARTS = ("streams", "configs", "scaling", "width")


def breakdown(out_dir: Path, device: str = "cuda", parts: tuple = BREAKDOWN_PARTS) -> dict:
    """Where the B=1 time goes, per configuration (_split_times), CUDA graphs after an L2 flush, the
    split count and workspace size beside them; then the shipped stage 1 as S grows (SCALING)."""
    from kernels.problems.mla_decode.reference import reference

    mod = _load_tuned()
    timer = Timer(device)
    inp = _inputs(BENCH, seed=1, device=device)
    streams = stream_yardsticks(timer, inp["kv"], device) if "streams" in parts else []
    rows = []
    ref = reference(**inp) if "configs" in parts else None
    for variant, waves, extra in (BREAKDOWN if "configs" in parts else []):
        cfg = {**stage1_config(base_config(), "SMALL_", variant, waves), **extra}
        row = _split_times(mod, timer, cfg, BENCH, inp, ref, {"variant": list(variant), "SPLIT_WAVES": waves,
                                                             **extra})
        rows.append(row)
        print(json.dumps(row), flush=True)
    # the shipped stage 1 on a fixed grid while S grows: 1 to 32 tiles per program. The intercept of
    # stage 1's time against tiles is what a program costs besides its tiles (launch, query load,
    # pipeline fill, workspace store), the slope what a tile costs
    scaling = []
    for splits, S in (itertools.product(SCALING_SPLITS, SCALING_S) if "scaling" in parts else []):
        shape = {**BENCH, "S": S}
        cfg = {**base_config(), "NUM_SPLITS": splits}
        x = _inputs(shape, seed=1, device=device)
        row = _split_times(mod, timer, cfg, shape, x, reference(**x), {"S": S})
        _, _, block_n, _, _, split_len = mod.plan(shape["B"], shape["H"], S)  # the regime's own tile rows
        row["tiles_per_program"] = split_len // block_n
        scaling.append(row)
        print(json.dumps(row), flush=True)
    width = {"streams": stream_yardsticks(timer, inp["kv"], device, WIDTH_STREAMS) if "width" in parts else [],
             "configs": []}
    for variant, splits in (WIDTH_CONFIGS if "width" in parts else []):
        cfg = {**stage1_config(base_config(), "SMALL_", variant, 1), "NUM_SPLITS": splits, "SMALL_WORKSPACE": "input"}
        ref = ref if ref is not None else reference(**inp)
        row = _split_times(mod, timer, cfg, BENCH, inp, ref, {"variant": list(variant),
                                                                          "programs": BENCH["H"] // variant[0] * splits})
        width["configs"].append(row)
        print(json.dumps(row), flush=True)
    result = {"host": host_facts(), "shape": BENCH, "rows": rows, "streams": streams, "scaling": scaling,
              "width": width}
    name = "mla_decode_breakdown.json" if set(parts) == set(BREAKDOWN_PARTS) else f"mla_decode_{'_'.join(parts)}.json"
    (out_dir / name).write_text(json.dumps(result, indent=1))
    return result


# Launch plans tried over the regime table (bench/gpu_measurements.sh mla-regimes): CONFIG overrides
# of the shipped kernel, each checked against the reference and timed on every shape.
PLAN_VARIANTS = {
    "shipped": {},
    "large_tiles": {"SMALL_BELOW": 0},
    "large_tiles_2_waves": {"SMALL_BELOW": 0, "SPLIT_WAVES": 2},
    "large_tiles_4_waves": {"SMALL_BELOW": 0, "SPLIT_WAVES": 4},
    "small_2_waves": {"SMALL_SPLIT_WAVES": 2},
    "small_4_waves": {"SMALL_SPLIT_WAVES": 4},
    "small_32_heads": {"SMALL_BLOCK_H": 32},
    "small_64_heads": {"SMALL_BLOCK_H": 64, "SMALL_num_warps": 8},
}
REGIME_SHAPES = [{"B": b, "H": h, "S": s} for b in (1, 4, 32) for h in (16, 64, 128) for s in (1024, 8192, 65536)]


def plans(out_dir: Path, device: str = "cuda") -> dict:
    """Every PLAN_VARIANTS entry on every regime shape: relative error and CUDA-graph time after an
    L2 flush, then the fastest correct variant per shape against the shipped plan."""
    import torch
    from kernels.problems.mla_decode.reference import reference

    mod = _load_tuned()
    timer = Timer(device)
    shipped = dict(mod.CONFIG)
    rows = []
    for shape in (REGIME_SHAPES if device == "cuda" else SETS["tiny"]):
        inp = _inputs(shape, seed=1, device=device)
        ref = reference(**inp)
        for name, over in PLAN_VARIANTS.items():
            mod.CONFIG.clear()
            mod.CONFIG.update({**shipped, **over})
            row = {"shape": shape, "variant": name, "plan": list(mod.plan(shape["B"], shape["H"], shape["S"]))}
            try:
                row["rel_err"] = compare(mod.mla_decode(**inp).float(), ref)[0]
                row["graph_us"] = timer.graph_us(lambda: mod.mla_decode(**inp))
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
        del inp, ref
        if device == "cuda":
            torch.cuda.empty_cache()
    mod.CONFIG.clear()
    mod.CONFIG.update(shipped)
    best = []
    for shape in {json.dumps(r["shape"]) for r in rows}:
        mine = [r for r in rows if json.dumps(r["shape"]) == shape and "graph_us" in r and r["rel_err"] < 2e-2]
        if mine:
            top = min(mine, key=lambda r: r["graph_us"])
            base = next((r for r in mine if r["variant"] == "shipped"), None)
            best.append({"shape": top["shape"], "variant": top["variant"], "graph_us": top["graph_us"],
                         "shipped_us": base and base["graph_us"]})
    result = {"host": host_facts(), "variants": PLAN_VARIANTS, "rows": rows, "best": best}
    (out_dir / "mla_decode_plans.json").write_text(json.dumps(result, indent=1))
    return result


# `pick`: regime variants timed on every regime shape (each shape forced into the variant's regime),
# then the CONFIG whose plan rule gives the best set of them, scored against torch.compile's times in
# the committed regime records. Overrides of the shipped CONFIG's regime keys (SMALL_ or plain).
PICK_SMALL = {
    "shipped": {},
    "input_ws": {"SMALL_WORKSPACE": "input"},
    "pf2_input_ws": {"SMALL_PREFETCH": 2, "SMALL_WORKSPACE": "input"},
    "pf2_input_ws_2_waves": {"SMALL_PREFETCH": 2, "SMALL_WORKSPACE": "input", "SMALL_SPLIT_WAVES": 2},
    "32x64_pf2_input_ws": {"SMALL_BLOCK_H": 32, "SMALL_BLOCK_N": 64, "SMALL_num_warps": 8, "SMALL_num_stages": 2,
                           "SMALL_PREFETCH": 2, "SMALL_WORKSPACE": "input"},
}
PICK_LARGE = {
    "shipped": {},
    "pf2": {"PREFETCH": 2},
    "pf2_input_ws": {"PREFETCH": 2, "WORKSPACE": "input"},
    "pf3_input_ws": {"PREFETCH": 3, "WORKSPACE": "input"},
    "pf2_input_ws_2_waves": {"PREFETCH": 2, "WORKSPACE": "input", "SPLIT_WAVES": 2},
    "32_rows_3_stages_pf3_input_ws": {"BLOCK_N": 32, "num_stages": 3, "PREFETCH": 3, "WORKSPACE": "input"},
}
# the rule's thresholds searched (each a TUNABLES value of tuned.py)
PICK_SMALL_BELOW = (0, 2, 4, 8, 16, 32, 64, 128)
PICK_WORK_BELOW = (0, 2**19, 2**21, 2**23, 2**25, 2**27, 2**29)
PICK_GOAL = 1.03  # a shape counts as won when the kernel is at least this much faster than torch.compile
PICK_CONTROL = ROOT / "kernels" / "problems" / "mla_decode" / "_tuned_control.py"  # the earlier kernel, if present
PICK_CONTROL_SHAPES = [BENCH, {"B": 1, "H": 128, "S": 8192}, {"B": 4, "H": 128, "S": 1024},
                       {"B": 32, "H": 128, "S": 1024}, EXTRA]


def _forced(base: dict, regime: str, over: dict) -> dict:
    """`base` with a variant's keys, every shape in the variant's regime."""
    cfg = {**base, **over}
    if regime == "small":
        cfg.update(SMALL_BELOW=10**9, SMALL_WORK_BELOW=2**62)
    else:
        cfg["SMALL_BELOW"] = 0
    return cfg


def _load_module(path: Path | None):
    if path is None:
        return _load_tuned()
    import importlib.util
    spec = importlib.util.spec_from_file_location("mla_control", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _warm_one(job: tuple[str | None, dict | None, dict, str]) -> str | None:
    """In a worker process: one call of a module (the shipped file with `cfg`, or the control with its
    own CONFIG) on a shape, which compiles its kernels into Triton's on-disk cache."""
    path, cfg, shape, device = job
    try:
        import torch
        mod = _load_module(Path(path) if path else None)
        if cfg is not None:
            mod.CONFIG.clear()
            mod.CONFIG.update(cfg)
        mod.mla_decode(**_inputs(shape, device=device))
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # the next job's inputs may be large; many workers share the GPU
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def _compile_refs() -> dict[str, float]:
    """torch.compile's latency per regime shape from the committed regime records (`marathon eval`)."""
    refs = {}
    for path in sorted((ROOT / "bench" / "results" / "h200").glob("mla_decode_tuned_regimes_B*.json")):
        for r in json.loads(path.read_text())["verdict"]["shapes"]:
            tc = (r.get("baselines") or {}).get("torch_compile")
            if tc:
                refs[json.dumps(r["shape"], sort_keys=True)] = tc
    return refs


def pick(out_dir: Path, device: str = "cuda", reps: int = 20, workers: int = 14, write: bool = False,
         budget_s: float | None = None) -> dict:
    import multiprocessing as mp

    import torch
    from kernels.problems.mla_decode.reference import reference

    t0 = time.time()
    shapes = REGIME_SHAPES if device == "cuda" else SETS["tiny"]
    base = base_config()
    variants = [("small", n, o) for n, o in PICK_SMALL.items()] + [("large", n, o) for n, o in PICK_LARGE.items()]
    control = PICK_CONTROL if PICK_CONTROL.exists() else None
    jobs = [(None, _forced(base, reg, over), shape, device) for shape in shapes for reg, _, over in variants]
    control_shapes = [x for x in shapes if x in PICK_CONTROL_SHAPES] if control else []
    jobs += [(str(control), None, shape, device) for shape in control_shapes]
    if device == "cuda":  # compile everything first, in parallel; the timing loop then finds it cached
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            errors = [e for e in pool.map(_warm_one, jobs) if e]
        print(f"compiled {len(jobs)} (variant, shape) jobs in {time.time() - t0:.0f} s; {len(errors)} failed: "
              f"{sorted(set(errors))[:3]}", flush=True)

    mod = _load_tuned()
    ctl = _load_module(control) if control else None
    timer = Timer(device, reps=reps)
    spec = get_problem(PROBLEM)
    limit = spec.tolerances[spec.dtypes[device]].rel
    rows = []
    for shape in shapes:
        if budget_s and time.time() - t0 > budget_s:
            break
        inp = _inputs(shape, seed=1, device=device)
        ref = reference(**inp)
        runs = [(reg, name, mod, _forced(base, reg, over)) for reg, name, over in variants]
        if shape in control_shapes:
            runs.append(("control", "control", ctl, None))
        for reg, name, m, cfg in runs:
            if budget_s and time.time() - t0 > budget_s:  # the rule search skips what is left untimed
                break
            if cfg is not None:
                m.CONFIG.clear()
                m.CONFIG.update(cfg)
            row = {"shape": shape, "regime": reg, "variant": name}
            try:
                row["plan"] = list(m.plan(shape["B"], shape["H"], shape["S"]))
                out = m.mla_decode(**inp).float()
                row["rel_err"] = compare(out, ref)[0]
                row["correct"] = bool(torch.isfinite(out).all()) and row["rel_err"] <= limit
                row["graph_us"] = round(timer.graph_us(lambda: m.mla_decode(**inp)), 2)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
        del inp, ref
        if device == "cuda":
            torch.cuda.empty_cache()

    # the rule: every (SMALL_BELOW, SMALL_WORK_BELOW, small variant, large variant), each shape's time
    # looked up from the plan that CONFIG gives it
    times = {(r["regime"], r["variant"], json.dumps(r["shape"], sort_keys=True)): r["graph_us"]
             for r in rows if r.get("correct")}
    refs = _compile_refs()
    scored = []
    for sb, wb, (sn, so), (ln, lo) in itertools.product(PICK_SMALL_BELOW, PICK_WORK_BELOW, PICK_SMALL.items(),
                                                        PICK_LARGE.items()):
        cfg = {**base, **so, **lo, "SMALL_BELOW": sb, "SMALL_WORK_BELOW": wb}
        mod.CONFIG.clear()
        mod.CONFIG.update(cfg)
        per = []
        for shape in shapes:
            key = json.dumps(shape, sort_keys=True)
            reg = "small" if mod.plan(shape["B"], shape["H"], shape["S"])[0] == "SMALL_" else "large"
            t = times.get((reg, sn if reg == "small" else ln, key))
            per.append((shape, reg, t, refs.get(key, t) if t else None))
        if any(t is None for _, _, t, _ in per):
            continue
        speedups = [tc / t for _, _, t, tc in per]
        won = sum(x >= PICK_GOAL for x in speedups)
        geo = math.prod(speedups) ** (1 / len(speedups))
        scored.append({"config": cfg, "small": sn, "large": ln, "won": won, "geomean_speedup": geo,
                       "per_shape": [{"shape": s, "regime": reg, "graph_us": t, "torch_compile_us": tc,
                                      "speedup": round(tc / t, 3)} for s, reg, t, tc in per]})
    scored.sort(key=lambda x: (-x["won"], -x["geomean_speedup"]))
    best = scored[0] if scored else None
    mod.CONFIG.clear()
    mod.CONFIG.update(base)

    # where the B=1 time goes, for the pick and the control: whole call, stage 1 alone, merge alone
    split = {}
    if best is not None and device == "cuda":
        inp = _inputs(BENCH, seed=1, device=device)
        ref = reference(**inp)
        split["pick"] = _split_times(mod, timer, best["config"], BENCH, inp, ref, {})
        if ctl:
            split["control"] = _split_times(ctl, timer, dict(ctl.CONFIG), BENCH, inp, ref, {})
        mod.CONFIG.clear()
        mod.CONFIG.update(base)
    result = {"host": host_facts(), "reps": reps, "goal": PICK_GOAL, "small_variants": PICK_SMALL,
              "large_variants": PICK_LARGE, "rows": rows, "best": best, "leaders": [
                  {k: v for k, v in x.items() if k != "per_shape"} for x in scored[:10]],
              "bench_split": split, "elapsed_s": round(time.time() - t0, 1)}
    (out_dir / "mla_decode_pick.json").write_text(json.dumps(result, indent=1))
    if best is not None:
        print(f"pick: small {best['small']}, large {best['large']}, SMALL_BELOW {best['config']['SMALL_BELOW']}, "
              f"SMALL_WORK_BELOW {best['config']['SMALL_WORK_BELOW']}: {best['won']} of {len(shapes)} shapes at "
              f">= {PICK_GOAL}x the recorded torch.compile, geomean {best['geomean_speedup']:.3f}x", flush=True)
        for x in best["per_shape"]:
            s = x["shape"]
            print(f"  B={s['B']:<3} H={s['H']:<4} S={s['S']:<6} {x['regime']:<6} {x['graph_us']:9.2f} us  "
                  f"torch.compile {x['torch_compile_us']:9.2f}  {x['speedup']:.2f}x", flush=True)
        print("bench split:", json.dumps(split), flush=True)
        if write:  # the shipped file with the picked CONFIG, as `marathon eval` then judges it
            TUNED_PATH.write_text(with_config(TUNED_PATH.read_text(), best["config"]))
    return result


def _tune_line(row: dict) -> str:
    c = row["config"]
    parts = []
    for pre in ("SMALL_", ""):
        parts.append(f"{pre[:1] or 'L'}:{'T' if c.get(pre + 'FORM') == 'tokens' else ''}H{c[pre + 'BLOCK_H']}"
                     f"N{c[pre + 'BLOCK_N']}w{c[pre + 'num_warps']}s{c[pre + 'num_stages']}x{c[pre + 'SPLIT_WAVES']}")
    head = " ".join(parts) + f" m{c['MERGE_BLOCK_D']}/{c['MERGE_WARPS']}{' pdl' if c['PDL'] else ''}"
    if "error" in row:
        return head + " ERROR " + row["error"][:120]
    return head + " | " + " | ".join(
        f"{r['shape']['B']}x{r['shape']['H']}x{r['shape']['S']}: {r['graph_us']:7.2f} us graph"
        + (f", {r['eager_us']:7.2f} eager, {r['host_us']:6.1f} host" if "eager_us" in r else "")
        + f" {r['hbm_pct']:5.1f}% HBM" + ("" if r["correct"] else f" WRONG rel {r['rel_err']:.2e}")
        for r in row["results"])


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
    ap.add_argument("mode", choices=("tune", "eval", "all", "study", "breakdown", "plans", "pick"))
    ap.add_argument("--flush", default="read", choices=("read", "write"),
                    help="tune: the L2 flush before each timed replay (kernels/evaluator/timing.py L2Flush)")
    ap.add_argument("--out", default=str(ROOT / ".marathon" / "bench"))
    ap.add_argument("--kernel", action="append", default=None, help="eval: starter and/or tuned (default both)")
    ap.add_argument("--set", action="append", default=None,
                    help="eval: bench, extra, headline, sweep (default headline)")
    ap.add_argument("--config", default=None, help="eval: a JSON CONFIG for tuned instead of the file's")
    ap.add_argument("--best-from", default=None, help="eval: take tuned's CONFIG from a mla_decode_tune.json")
    ap.add_argument("--no-baselines", action="append", default=[], metavar="KERNEL",
                    help="eval: skip the baselines for this kernel's evaluations (repeatable)")
    ap.add_argument("--no-baselines-set", action="append", default=[], metavar="SET",
                    help="eval: skip the baselines for this shape set's evaluations (repeatable)")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=20, help="pick: timed replays per (variant, shape)")
    ap.add_argument("--write", action="store_true", help="pick: rewrite tuned.py's CONFIG with the pick")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a dry run of the script itself in the Triton interpreter")
    ap.add_argument("--limit", type=int, default=None, help="tune: only the first N stage-1 variants")
    ap.add_argument("--finalists", type=int, default=2, help="tune: leaders per regime combined in phase 2")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="all: stop starting new steps after this; pick: stop timing after this")
    ap.add_argument("--timeout", type=float, default=300.0, help="eval: the candidate's wall-clock limit")
    ap.add_argument("--part", action="append", choices=BREAKDOWN_PARTS, default=None,
                    help="breakdown: only these parts (streams: the cache stream without the math; configs: "
                         "BREAKDOWN; scaling: the shipped stage 1 as S grows; width: the stream and stage 1 "
                         "with its merge at up to ~1,000 programs); default all")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    deadline = start + args.budget_s if args.budget_s else None
    if args.device == "cpu":  # before the kernel module is imported: triton.jit reads it then
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ.setdefault("MARATHON_TRITON_CACHE", os.environ.get("TRITON_CACHE_DIR", "/tmp/marathon-triton-cache"))

    if args.mode == "study":
        study(out_dir, args.device)
        return 0
    if args.mode == "plans":
        plans(out_dir, args.device)
        return 0
    if args.mode == "pick":
        return 0 if pick(out_dir, args.device, args.reps, args.workers, args.write, args.budget_s)["best"] else 1
    if args.mode == "breakdown":
        breakdown(out_dir, args.device, tuple(args.part or BREAKDOWN_PARTS))
        return 0
    tune_result = None
    config = json.loads(args.config) if args.config else None
    if args.best_from:
        config = json.loads(Path(args.best_from).read_text())["best"]
    if args.mode in ("tune", "all"):
        tune_deadline = start + 0.5 * args.budget_s if args.budget_s else None
        tune_result = tune(out_dir, args.workers, tune_deadline, args.device, args.limit, args.finalists,
                           args.flush)
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
            baselines = kernel not in args.no_baselines and set_name not in args.no_baselines_set
            records.append(eval_kernel(kernel, set_name, out_dir, config, baselines, args.timeout, args.device))
            summarize(records, tune_result, out_dir, show=False)  # after each, so a kill keeps the rest
    if records:
        summarize(records, tune_result, out_dir)
    return 0 if records and all(r["verdict"]["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
