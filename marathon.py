"""The `marathon` command: a thin front over the evaluator (and, later, the Temporal runs)."""
from __future__ import annotations

import argparse
import sys

from kernels.evaluator import EvaluatorError, evaluate, request_for
from kernels.problem import PROBLEM_NAMES, ShapeError, parse_shape
from kernels.verdict import Verdict


def _table(v: Verdict) -> str:
    lines = [f"{v.problem} / {v.kernel} on {v.device}" + (f" ({v.gpu.name}, driver {v.gpu.driver})" if v.gpu else "")
             + f": {v.status.upper()}", f"  {v.reason}"]
    if v.shapes:
        header = f"  {'shape':<34} {'ok':<3} {'rel_err':>9} {'us':>10} {'graph us':>10} {'roofline':>8}  speedups"
        lines += ["", header]
        for r in v.shapes:
            shape = ",".join(f"{k}={x}" for k, x in r.shape.items())
            graph = r.timing.graph_median_us if r.timing and r.timing.graph_median_us else None
            sp = "  ".join(f"{k} {x:.2f}x ({r.baselines[k]:.1f} us)" for k, x in r.speedup.items())
            lines.append(f"  {shape:<34} {'yes' if r.correct else 'no':<3} "
                         f"{(f'{r.rel_err:.2e}' if r.rel_err is not None else '-'):>9} "
                         f"{(f'{r.latency_us:.2f}' if r.latency_us is not None else '-'):>10} "
                         f"{(f'{graph:.2f}' if graph else '-'):>10} "
                         f"{(f'{r.roofline_pct:.1f}%' if r.roofline_pct is not None else '-'):>8}  {sp}")
    if not v.timing_meaningful and any(r.latency_us for r in v.shapes):
        lines.append("  (CPU / Triton interpreter: times are not meaningful)")
    lines += [f"  flag: {f}" for f in v.flags]
    lines.append(f"  torch {v.versions.get('torch')}, triton {v.versions.get('triton')}, {v.elapsed_s:.1f} s")
    if v.status != "ok" and v.log_tail.strip():
        lines += ["", "  candidate output (tail):"] + ["    " + x for x in v.log_tail.strip().splitlines()[-20:]]
    return "\n".join(lines)


def cmd_eval(args: argparse.Namespace) -> int:
    try:
        shapes = [parse_shape(s) for s in args.shape]
        req = request_for(args.problem, args.kernel, device=args.device, shape_set=args.shapes, shapes=shapes,
                          timeout_s=args.timeout, mode=args.mode, seeds=args.seeds, reps=args.reps,
                          baselines=not args.no_baselines)
        verdict = evaluate(req)
    except (ShapeError, KeyError, FileNotFoundError, ValueError) as exc:
        print(f"marathon eval: {exc}", file=sys.stderr)
        return 2
    except EvaluatorError as exc:
        print(f"marathon eval: infrastructure error: {exc}", file=sys.stderr)
        return 3
    print(verdict.model_dump_json(indent=2) if args.json else _table(verdict))
    return 0 if verdict.ok else 1


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="marathon", description="Day-long, crash-proof Triton kernel optimization.")
    sub = ap.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="judge one kernel: policy, compile, correctness, timing against baselines")
    ev.add_argument("--problem", required=True, choices=PROBLEM_NAMES)
    ev.add_argument("--kernel", required=True, help="a file path, or a shipped kernel's name (starter, ...)")
    ev.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ev.add_argument("--shapes", default=None, choices=("smoke", "bench", "sweep"),
                    help="a named shape set (default: smoke on the CPU, bench on CUDA)")
    ev.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE,...",
                    help="an explicit shape, e.g. B=3,H=4,S=1000 (repeatable; replaces --shapes)")
    ev.add_argument("--timeout", type=float, default=600.0, help="wall-clock seconds for the candidate's process")
    ev.add_argument("--mode", default="full", choices=("compile", "test", "full"))
    ev.add_argument("--seeds", type=int, default=3, help="fresh random inputs per shape (at least 3 counts)")
    ev.add_argument("--reps", type=int, default=None, help="timed calls (at least 20 on CUDA)")
    ev.add_argument("--no-baselines", action="store_true")
    ev.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    ev.set_defaults(func=cmd_eval)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
