"""The same honest evaluations judged by two copies of the evaluator, alternately: does a change to the
judge or the sandbox (the seal, the record, the judge's clock) move an honest kernel's timing?

    python bench/judge_ab.py --tree before=/path/to/old/checkout --tree after=. \
        [--kernel mla_decode:tuned --kernel kda:tuned] [--rounds 2] [--budget 400] [--out ab.json]

Each round judges every kernel once with each tree, in alternating order (full mode, the problem's
bench shapes, no baselines), so drift of the GPU's clocks falls on both. Reported per kernel and tree:
the status, the median event time, the CUDA-graph median, the synchronised wall clock and the judge's
own clock (where the tree has one), with the ratios after/before of the medians. Run on the GPU host;
the output is a figures object for bench/record_verdict.py --figures."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from kernels.evaluator.evaluate import EvalRequest
from kernels.problems.spec import get_problem, resolve_kernel


def judge(tree: Path, problem: str, kernel: str, env: dict[str, str], timeout: float) -> dict:
    req = EvalRequest(problem=problem, source=resolve_kernel(get_problem(problem), kernel)[1], kernel=kernel,
                      device="cuda", mode="full", shape_set="bench", baselines=False, probe_shapes=0, timeout_s=timeout)
    with tempfile.TemporaryDirectory(prefix="marathon-ab-") as tmp:
        req_path, out_path = Path(tmp) / "request.json", Path(tmp) / "verdict.json"
        req_path.write_text(req.model_dump_json())
        full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "kernels.evaluator.judge", str(req_path), str(out_path)],
                              capture_output=True, text=True, timeout=timeout + 240, cwd=tmp, env=full)
        wall = round(time.monotonic() - t0, 1)
        if not out_path.exists():
            return {"status": "judge-error", "error": (proc.stdout + proc.stderr)[-1500:], "wall_s": wall}
        v = json.loads(out_path.read_text())
    shapes = [{"shape": s["shape"], "median_us": s["timing"]["median_us"] if s.get("timing") else None,
               "graph_median_us": s["timing"].get("graph_median_us") if s.get("timing") else None,
               "sync_wall_us": s["timing"].get("sync_wall_us") if s.get("timing") else None,
               "judge_clock_us": s["timing"].get("judge_clock_us") if s.get("timing") else None}
              for s in v.get("shapes", [])]
    return {"status": v["status"], "reason": v["reason"][-600:], "flags": v.get("flags", []), "shapes": shapes,
            "phases_s": v.get("phases_s", {}), "elapsed_s": v.get("elapsed_s"), "wall_s": wall,
            "sandbox": v.get("sandbox", {})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH of an evaluator checkout (twice)")
    ap.add_argument("--kernel", action="append", default=None, help="problem:shipped-kernel (default: both tuned)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget", type=float, default=400.0, help="seconds; no round starts after it")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for every judge")
    ap.add_argument("--cold", action="append", default=[],
                    help="a tree NAME whose first judge of each kernel starts from an empty Triton cache "
                         "(so the whole compile path runs in its sandbox)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    kernels = [k.split(":") for k in (args.kernel or ["mla_decode:tuned", "kda:tuned"])]
    env = dict(e.split("=", 1) for e in args.env)
    t0 = time.monotonic()
    runs: list[dict] = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = list(trees)
    for r in range(args.rounds):
        if time.monotonic() - t0 > args.budget:
            break
        for problem, kernel in kernels:
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                run_env = dict(env)
                if name in args.cold and r == 0:
                    run_env["MARATHON_TRITON_CACHE"] = tempfile.mkdtemp(prefix="marathon-ab-cache-")
                res = judge(Path(trees[name]).resolve(), problem, kernel, run_env, args.timeout)
                runs.append({"round": r, "tree": name, "problem": problem, "kernel": kernel, **res})
                first = res.get("shapes", [{}])[0] if res.get("shapes") else {}
                print(f"[{time.monotonic() - t0:6.1f}s] round {r} {problem}:{kernel} {name}: {res['status']} "
                      f"median {first.get('median_us')} graph {first.get('graph_median_us')} "
                      f"clock {first.get('judge_clock_us')}", flush=True)
                out.write_text(json.dumps({"runs": runs}, indent=1))
    summary = {}
    for problem, kernel in kernels:
        per_tree = {}
        for name in names:
            medians = [s["median_us"] for x in runs if x["tree"] == name and x["problem"] == problem
                       and x["kernel"] == kernel and x["status"] == "ok" for s in x["shapes"][:1] if s["median_us"]]
            graphs = [s["graph_median_us"] for x in runs if x["tree"] == name and x["problem"] == problem
                      and x["kernel"] == kernel and x["status"] == "ok" for s in x["shapes"][:1] if s["graph_median_us"]]
            per_tree[name] = {"median_us": statistics.median(medians) if medians else None,
                              "graph_median_us": statistics.median(graphs) if graphs else None, "runs": len(medians)}
        if len(names) == 2 and all(per_tree[n]["median_us"] for n in names):
            a, b = names
            per_tree["ratio_median"] = round(per_tree[b]["median_us"] / per_tree[a]["median_us"], 4)
            if all(per_tree[n]["graph_median_us"] for n in names):
                per_tree["ratio_graph"] = round(per_tree[b]["graph_median_us"] / per_tree[a]["graph_median_us"], 4)
        summary[f"{problem}:{kernel}"] = per_tree
    out.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
