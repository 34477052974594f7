"""KDA's context parallelism (the segments of kernels/problems/kda/tuned.py) on a GPU: variants of its
knobs, each checked against the reference and timed whole, beside the shipped kernel with the split
off (CP_SEGS 0) in the same process; the shipped CONFIG's phases apart; the pick written out as a
candidate source for `marathon eval`.

    python bench/kda_cp.py [--out DIR] [--device cpu]

Checks: at every timed shape, the three gate cases of the generator and slow gates (-U(0, 0.02): the
state outlives the segments, so a wrong combine of the segments' states shows), max relative error
against the reference; plus the shapes of tests/kernels/problems/test_kda_tuned.py's GPU segment test. Timing: CUDA-graph
replays, the L2 flushed before each, median of 30 (kernels/evaluator/timing.py). Phases: the
preparation alone (every later kernel skipped), then with the segments' states (the segment scan
skipped); the segment scan is the whole minus that.

Writes DIR/kda_cp.json (figures, host, pick) and DIR/kda_cp_pick.py (tuned.py with the pick's CONFIG:
the variant correct everywhere with the smallest sum over shapes of its time over the split-off time)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TUNED_PATH = ROOT / "kernels" / "problems" / "kda" / "tuned.py"
# changes to the shipped CONFIG; "off" is today's kernel without segments, the yardstick
VARIANTS = [
    ("off", {"CP_SEGS": 0}),
    ("shipped", {}),
    ("scan BV 32, 4 warps", {"CP_BV": 32, "CP_WARPS": 4}),
    ("scan BV 128, 8 warps, 2 stages", {"CP_BV": 128, "CP_WARPS": 8, "CP_STAGES": 2}),
    ("states BV 128, 8 warps", {"CP_TBV": 128, "CP_TWARPS": 8}),
    ("states BV 32, 3 stages", {"CP_TBV": 32, "CP_TSTAGES": 3}),
    ("states 3 stages", {"CP_TSTAGES": 3}),
    ("at most 4 segments", {"CP_SEGS": 4}),
    ("split at 32 heads too", {"CP_BELOW": 2.0}),
]
SHAPES = {"cuda": [{"B": 1, "T": 8192, "H": 8, "K": 128, "V": 128}, {"B": 1, "T": 8192, "H": 16, "K": 128, "V": 128},
                   {"B": 1, "T": 8192, "H": 32, "K": 128, "V": 128}, {"B": 1, "T": 32768, "H": 8, "K": 128, "V": 128}],
          "cpu": [{"B": 1, "T": 300, "H": 2, "K": 32, "V": 32}]}
# checked only: tests/kernels/problems/test_kda_tuned.py::test_bf16_on_gpu_segments' shapes
CHECK_ONLY = {"cuda": [{"B": 2, "T": 1000, "H": 1, "K": 128, "V": 128}, {"B": 1, "T": 4095, "H": 4, "K": 128, "V": 128},
                       {"B": 1, "T": 2000, "H": 16, "K": 128, "V": 128}],
              "cpu": [{"B": 2, "T": 130, "H": 1, "K": 16, "V": 32}]}
# the interpreter's knobs: tiles small enough for its shapes, segments of one chunk
CPU_KNOBS = {"PREP_BK": 16, "PREP_BV": 16, "SCAN_BV": 16, "CP_BV": 16, "CP_TBV": 16, "CP_MIN_CHUNKS": 1}
# compile shapes: T and H divisible by 16 or not as at the timed shapes (the launcher specializes on it)
WARM = [{"B": 1, "T": 1024, "H": 8, "K": 128, "V": 128}, {"B": 1, "T": 1024, "H": 32, "K": 128, "V": 128}]


def _config(over: dict, device: str) -> dict:
    from kernels.problems.tunables import read_tunables
    base = dict(read_tunables(TUNED_PATH.read_text())[1])
    return {**base, **(CPU_KNOBS if device == "cpu" else {}), **over}


def _inputs(shape: dict, seed: int, device: str, slow: bool) -> dict:
    import torch
    from kernels.problems.kda.reference import make_inputs
    x = make_inputs(shape, seed, device, torch.bfloat16 if device == "cuda" else torch.float32)
    if slow:
        gen = torch.Generator(device=device).manual_seed(seed)
        x["g"] = -0.02 * torch.rand(x["g"].shape, generator=gen, device=device)
    return x


def _tuned():
    import importlib
    return importlib.import_module("kernels.problems.kda.tuned")


def _warm(job: tuple[list[dict], str]) -> list[str | None]:
    """In a worker process: run configurations once, which compiles their kernels into the Triton cache
    (shared through TRITON_CACHE_DIR) and finds those that fail. One error text (or None) each."""
    configs, device = job
    import torch
    mod = _tuned()
    errors = []
    for cfg in configs:
        try:
            mod.CONFIG.clear()
            mod.CONFIG.update(cfg)
            for shape in WARM:
                mod.kda(**_inputs(shape, 0, device, False))
            torch.cuda.synchronize()
            errors.append(None)
        except Exception as exc:  # a configuration that does not fit is an answer, not a crash
            errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            if "CUDA" in str(exc) or "illegal" in str(exc):
                errors += ["after a CUDA fault in this worker: untested"] * (len(configs) - len(errors))
                break
    return errors


class _Skip:
    """Stands in for a kernel, to time the ones before it alone (the output is then wrong)."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / ".marathon" / "bench"))
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
    os.environ.setdefault("TRITON_CACHE_DIR", "/tmp/kda-triton-cache")
    import multiprocessing as mp

    import torch
    from kernels.evaluator.hostinfo import host_facts
    from kernels.evaluator.timing import compare
    from kernels.problems.kda.reference import reference
    from kernels.problems.tunables import with_config

    t0 = time.time()
    dev = args.device
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    configs = {name: _config(over, dev) for name, over in VARIANTS}
    broken: dict[str, str] = {}
    if dev == "cuda":
        names = list(configs)
        workers = min(8, len(names))
        jobs = [([configs[n] for n in names[i::workers]], dev) for i in range(workers)]
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            for i, errs in enumerate(pool.map(_warm, jobs)):
                broken.update({n: e for n, e in zip(names[i::workers], errs) if e})
        print(f"compiled {len(names)} variants in {time.time() - t0:.0f} s; failed: {broken}", flush=True)

    mod = _tuned()
    sms = torch.cuda.get_device_properties(0).multi_processor_count if dev == "cuda" else 132
    if dev == "cuda":
        from kernels.evaluator.timing import L2Flush, captured, median_event_us
        flush = L2Flush(dev)

        def timed(fn) -> float:
            return median_event_us(captured(fn).replay, flush, 30)
    else:
        def timed(fn) -> float:
            s = time.perf_counter()
            fn()
            return 1e6 * (time.perf_counter() - s)

    def use(name: str) -> None:
        mod.CONFIG.clear()
        mod.CONFIG.update(configs[name])

    rows = []
    for shape in SHAPES[dev] + CHECK_ONLY[dev]:
        timed_shape = shape in SHAPES[dev]
        cases = [(_inputs(shape, 10 + s, dev, s == 3), s) for s in range(4)]  # three gate cases, slow gates
        refs = [reference(**x) for x, _ in cases]
        nt = -(-shape["T"] // mod.CHUNK)
        for name in configs:
            if name in broken:
                rows.append({"shape": shape, "variant": name, "error": broken[name]})
                continue
            use(name)
            bvp = max(16, 1 << (shape["V"] - 1).bit_length())
            row = {"shape": shape, "variant": name, "segments": mod._segments(shape["B"], shape["H"], nt, bvp, sms)}
            try:
                errs = []
                for (x, _), ref in zip(cases, refs):
                    out = mod.kda(**x).float()
                    errs.append(compare(out, ref)[0] if bool(torch.isfinite(out).all()) else math.inf)
                row["rel_err"] = errs  # seeds 10, 11, 12 (gate cases), 13 (slow gates)
                if timed_shape:
                    row["us"] = timed(lambda: mod.kda(**cases[1][0]))
                    if name == "shipped":  # the phases apart
                        saved = (mod._kda_scan, mod._kda_seg_state, mod._kda_seg_scan)
                        mod._kda_scan = mod._kda_seg_state = mod._kda_seg_scan = _Skip()
                        row["prep_us"] = timed(lambda: mod.kda(**cases[1][0]))
                        mod._kda_seg_state = saved[1]
                        row["prep_states_us"] = timed(lambda: mod.kda(**cases[1][0]))
                        mod._kda_scan, mod._kda_seg_state, mod._kda_seg_scan = saved
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                if "CUDA" in str(exc) or "illegal" in str(exc):
                    rows.append(row)
                    print("CUDA fault: stopping", flush=True)
                    break
            rows.append(row)
            print(json.dumps(row), flush=True)
        del cases, refs
        if dev == "cuda":
            torch.cuda.empty_cache()

    limit = 2e-2 if dev == "cuda" else 1e-3
    off = {json.dumps(r["shape"]): r["us"] for r in rows if r["variant"] == "off" and "us" in r}
    score = {}
    for name in configs:
        mine = [r for r in rows if r["variant"] == name]
        if all("error" not in r and max(r["rel_err"]) < limit for r in mine) and len(mine) == len(
                SHAPES[dev] + CHECK_ONLY[dev]):
            score[name] = sum(r["us"] / off[json.dumps(r["shape"])] for r in mine if "us" in r)
    pick = min(score, key=score.get) if score else "off"
    summary = []
    for r in rows:
        if "us" in r:
            key = json.dumps(r["shape"])
            summary.append(f"{r['variant']:<32} B={r['shape']['B']} T={r['shape']['T']} H={r['shape']['H']}: "
                           f"{r['us']:.1f} us ({off[key] / r['us']:.2f}x off), segments {r['segments']}, "
                           f"max rel err {max(r['rel_err']):.2e}")
    print("\n".join(summary))
    print(f"pick: {pick} (scores {json.dumps({k: round(v, 3) for k, v in score.items()})})", flush=True)
    record = {"host": host_facts(), "sms": sms, "variants": dict(VARIANTS), "rows": rows, "scores": score,
              "pick": pick, "pick_config": configs[pick], "elapsed_s": round(time.time() - t0, 1)}
    (out_dir / "kda_cp.json").write_text(json.dumps(record, indent=1))
    pick_cfg = _config(dict(VARIANTS)[pick], "cuda")  # the GPU knobs, also after a dry run
    (out_dir / "kda_cp_pick.py").write_text(with_config(TUNED_PATH.read_text(), pick_cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
