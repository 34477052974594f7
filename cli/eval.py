"""`marathon eval`: judge one kernel (policy, compile, correctness, timing against baselines) and print
the verdict."""
from __future__ import annotations

import argparse
import sys

from cli.args import REPS, SECONDS, SEEDS
from cli.tables import verdict_table
from kernels.evaluator.evaluate import EvaluatorError, evaluate, request_for
from kernels.problems.spec import PROBLEM_NAMES, ShapeError, parse_shape, resolve_problem


def cmd_eval_task(args: argparse.Namespace) -> int:
    """A task's files (or a patch of them, or a candidate text) measured against the task's own."""
    from pathlib import Path

    from activities.evaluation import task_cache_root
    from kernels import user_file
    from tasks import document
    from tasks.measure import TaskBroken, measure
    from tasks.spec import TaskError, load_task
    try:
        bundle = load_task(args.task)
        if args.patch and args.kernel:
            raise ValueError("give --patch or --kernel, not both")
        text = None
        if args.patch:
            text = document.join(document.apply_patch(bundle, user_file.read_text(args.patch, "--patch")))
        elif args.kernel:
            text = user_file.read_text(args.kernel, "--kernel")
        verdict = measure(bundle, text, task_cache_root(), mode="test" if args.mode != "full" else "full",
                          repeat=args.reps, kernel=Path(args.patch or args.kernel or "own files").name)
    except (TaskError, TaskBroken, document.DocumentError, OSError, UnicodeDecodeError, ValueError) as exc:
        print(f"marathon eval: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    print(verdict.model_dump_json(indent=2) if args.json else verdict_table(verdict))
    return 0 if verdict.ok else 1


def cmd_eval(args: argparse.Namespace) -> int:
    if args.task:
        return cmd_eval_task(args)
    if args.patch:
        print("marathon eval: --patch goes with --task", file=sys.stderr)
        return 2
    args.kernel = args.kernel or "starter"
    try:
        shapes = [parse_shape(s) for s in args.shape]
        name, problem_source = resolve_problem(args.problem)
        req = request_for(name, args.kernel, problem_source=problem_source, dtype=args.dtype,
                          device=args.device, shape_set=args.shapes, shapes=shapes,
                          timeout_s=args.timeout, mode=args.mode, seeds=args.seeds, reps=args.reps,
                          baselines=not args.no_baselines, only_baselines=args.baseline)
        verdict = evaluate(req)
    except (ShapeError, KeyError, FileNotFoundError, ValueError) as exc:
        print(f"marathon eval: {exc}", file=sys.stderr)
        return 2
    except EvaluatorError as exc:
        print(f"marathon eval: infrastructure error: {exc}", file=sys.stderr)
        return 3
    if verdict.problem_error:  # the problem's own failure: no verdict on the kernel
        print(f"marathon eval: {verdict.problem_error}", file=sys.stderr)
        return 2
    print(verdict.model_dump_json(indent=2) if args.json else verdict_table(verdict))
    return 0 if verdict.ok else 1


def add_parser(sub) -> None:
    ev = sub.add_parser("eval", help="judge one kernel: policy, compile, correctness, timing against baselines")
    which = ev.add_mutually_exclusive_group(required=True)
    which.add_argument("--problem", help=f"a built-in problem ({', '.join(PROBLEM_NAMES)}), its folder, or a KernelBench-format .py file")
    which.add_argument("--task", metavar="DIR", help="a task (a folder with task.toml): measure its files, a --patch of "
                       "them or a --kernel text of files against the task's own")
    ev.add_argument("--patch", default=None, metavar="FILE", help="with --task: a diff of the task's files (a run's best.patch)")
    ev.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"),
                    help="the input dtype (default: the problem's; float32 for a KernelBench file)")
    ev.add_argument("--kernel", default=None, help="a file path, or a shipped kernel's name (starter, ...)")
    ev.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ev.add_argument("--shapes", default=None, choices=("smoke", "bench", "sweep"),
                    help="a named shape set (default: smoke on the CPU, bench on CUDA)")
    ev.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE,...",
                    help="an explicit shape, e.g. B=3,H=4,S=1000 (repeatable; replaces --shapes); a KernelBench "
                         "file's: any of its overridable constants (NAME[i] for an element of a tuple)")
    ev.add_argument("--timeout", type=SECONDS, default=600.0, help="wall-clock seconds for the candidate's process")
    ev.add_argument("--mode", default="full", choices=("compile", "test", "full"))
    ev.add_argument("--seeds", type=SEEDS, default=3, help="fresh random inputs per shape (at least 3 counts)")
    ev.add_argument("--reps", type=REPS, default=None, help="timed calls (at least 20 on CUDA)")
    ev.add_argument("--no-baselines", action="store_true")
    ev.add_argument("--baseline", action="append", default=[], metavar="NAME",
                    help="time only this baseline (repeatable; default: all the problem offers)")
    ev.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    ev.set_defaults(func=cmd_eval)
