"""Where the `tuned` KDA kernel goes wrong on a GPU: its error against the fp32 reference by shape,
CONFIG change and source, with the error of each 16-row block of the first chunk and of the last
chunk, so that a failure shows which sub-chunk it is in.

    python bench/kda_partial_chunks.py --out DIR [--source OLD_TUNED.py ...]

Runs the kernels (our own sources, not candidates) in worker processes, one job (a source and a CONFIG
change, all its shapes and seeds) each, so that the compiles run in parallel. A fault does not stay in
its process on the H200: pure-torch jobs running beside older tuned.py
sources failed with "illegal memory access" too, so run a source that may fault on its own (--workers 1).
Writes DIR/kda_partial_chunks.json with the host facts."""
from __future__ import annotations

import argparse
import importlib.util
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TUNED = ROOT / "kernels" / "problems" / "kda" / "tuned.py"
FULL = {"B": 1, "H": 32, "K": 128, "V": 128}
# T below, at and past a chunk (64) and a sub-chunk (16); the sweep's odd lengths; one chunk-aligned
SHAPES = [{**FULL, "T": t} for t in (1, 2, 4, 16, 17, 32, 48, 49, 63, 64, 65, 127, 1000, 2049, 1024)] + [
    {"B": 1, "T": 4095, "H": 8, "K": 64, "V": 64}, {"B": 1, "T": 64, "H": 8, "K": 64, "V": 64},
    # H = 1 is made a constant by the launcher too (not yet run on a GPU)
    {"B": 2, "T": 63, "H": 1, "K": 128, "V": 128}, {"B": 2, "T": 1000, "H": 1, "K": 128, "V": 128}]
# one knob of the shipped CONFIG changed at a time, at a few lengths
CHANGES = [{"SCAN_WQ": False}, {"SCAN_STAGES": 1}, {"MANY_HEADS": 1}, {"PREP_ORDER": "heads"},
           {"PREP_BK": 64, "PREP_BV": 64}]
CHANGE_SHAPES = [{**FULL, "T": t} for t in (49, 63, 1000)]
BASELINES = ("fla", "torch_chunked")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"kda_under_test_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_job(job: tuple[str, dict, list[dict], list[str], str]) -> list[dict]:
    """One source and CONFIG change over its shapes, seeds 0..2 (the three gate cases) and dtypes."""
    source, change, shapes, dtypes, device = job
    import torch
    from kernels.evaluator.timing import compare  # the evaluator's own relative error
    from kernels.problems.kda.reference import make_inputs, reference

    def rel(out, ref) -> float:
        return compare(out, ref)[0]

    if source in BASELINES:  # a baseline, as a check of the reference at these lengths
        from kernels.problems.kda import baselines
        fn = baselines._fla_chunk_kda() if source == "fla" else baselines.kda_chunked_torch
    else:
        mod = _load(Path(source))
        mod.CONFIG.update(change)
        fn = mod.kda
    rows = []
    for shape in shapes:
        for dtype in dtypes:
            for seed in range(3):
                name = source if source in BASELINES else Path(source).name
                row = {"source": name, "change": change, "shape": shape, "dtype": dtype, "seed": seed}
                try:
                    inp = make_inputs(shape, seed, device, getattr(torch, dtype))
                    out = fn(**inp).float()
                    if device == "cuda":
                        torch.cuda.synchronize()
                    ref = reference(**inp)
                    row["rel_err"], _, row["finite"] = compare(out, ref)
                    T = shape["T"]
                    last0 = (T - 1) // 64 * 64
                    row["first_chunk_blocks"] = [rel(out[:, r:min(r + 16, T)], ref[:, r:min(r + 16, T)])
                                                 for r in range(0, min(64, T), 16)]
                    row["last_chunk_blocks"] = [rel(out[:, r:min(r + 16, T)], ref[:, r:min(r + 16, T)])
                                                for r in range(last0, T, 16)]
                except Exception as exc:  # a fault is a finding; the rest of this job is untested
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    rows.append(row)
                    return rows
                rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--source", type=Path, action="append", default=[],
                    help="another tuned.py (e.g. an older commit's) to run at the shapes too")
    ap.add_argument("--baselines", action="store_true", help="run FLA's chunk_kda and the torch chunked form too")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run in the Triton interpreter at T=17 and 63, K=V=32")
    args = ap.parse_args()
    from kernels.evaluator.hostinfo import host_facts
    shapes, change_shapes, low = SHAPES, CHANGE_SHAPES, "bfloat16"
    if args.device == "cpu":  # the interpreter: tiny shapes, fp16 for bf16 (its bf16 loads are garbage)
        shapes = change_shapes = [{"B": 1, "T": t, "H": 2, "K": 32, "V": 32} for t in (17, 63)]
        low = "float16"
    jobs = [(str(TUNED), {}, [s], [low, "float32"], args.device) for s in shapes]
    jobs += [(str(TUNED), c, change_shapes, [low], args.device) for c in CHANGES]
    jobs += [(str(p.resolve()), {}, [s], [low], args.device) for p in args.source for s in shapes if s["T"] <= 127]
    jobs += [(b, {}, [s], [low], args.device) for b in (BASELINES if args.baselines else ()) for s in shapes
             if b != "fla" or args.device == "cuda"]
    rows = []
    import multiprocessing as mp
    with ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as pool:
        for job_rows in pool.map(run_job, jobs):
            for r in job_rows:
                print(r["source"], json.dumps(r["change"]), r["shape"]["T"], r["shape"]["K"], r["dtype"], r["seed"],
                      r.get("error") or f"rel {r['rel_err']:.3g} first {[round(x, 4) for x in r['first_chunk_blocks']]}"
                      f" last {[round(x, 4) for x in r['last_chunk_blocks']]}", flush=True)
            rows += job_rows
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kda_partial_chunks.json").write_text(json.dumps({"host": host_facts(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
