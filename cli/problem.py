"""`marathon problem FILE`: the check a user runs on a KernelBench-format file before a night's run. The
file runs in its fenced process (through a judge process, as in an evaluation): its sizes and other
constants, the shape sets (smoke: SMOKE_SHAPES or the small sizes it chose for a CPU; bench: its own),
the reference once per shape the device would judge, and the statement's first lines."""
from __future__ import annotations

import argparse
import json
import sys

STATEMENT_LINES = 12  # of the statement, in the text form (--json holds it whole)


def _one_line(path: str, name: str, error: str) -> str:
    """The problem's error, naming the file by the path the user gave."""
    return f"marathon problem: {path}{error.removeprefix(f'problem {name}')}"


def _shape(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items()) or "(the file's own)"


def text(report) -> str:
    lines = [f"problem {report.name} on {report.device} ({report.dtype})",
             "  dimensions (sizes): " + (_shape(report.dimensions) if report.dimensions else "none"),
             "  other constants: " + (", ".join(f"{k}={v!r}" for k, v in report.constants.items()) or "none")]
    for name in ("smoke", "bench"):
        shapes = report.shapes.get(name) or []
        lines.append(f"  {name}: " + ("; ".join(_shape(s) for s in shapes) if shapes else "none"))
    if report.chosen:
        lines.append(f"  chosen: {report.chosen}")
    for call in report.reference:
        if call.status == "ok":
            lines.append(f"  reference at {_shape(call.shape)}: ok, output {tuple(call.output_shape or ())}, "
                         f"{call.seconds:.3f} s")
        else:
            lines.append(f"  reference at {_shape(call.shape)}: ERROR {call.error}")
    if report.error and not any(c.status != "ok" for c in report.reference):
        lines.append(f"  ERROR {report.error}")
    head = report.statement.strip().splitlines()[:STATEMENT_LINES]
    if head:
        lines += ["", "statement (first lines):"] + ["  " + x for x in head]
    return "\n".join(lines)


def cmd_problem(args: argparse.Namespace) -> int:
    from kernels.evaluator.evaluate import EvaluatorError, ProblemCheck, check_problem
    from kernels.problems.spec import PROBLEM_NAMES, ProblemFileError, ShapeError, parse_shape, resolve_problem
    try:
        if args.file in PROBLEM_NAMES:
            raise ProblemFileError(f"{args.file} is a built-in problem; give a KernelBench-format .py file")
        name, source = resolve_problem(args.file)
        if source is None:
            raise ProblemFileError(f"{args.file} is a built-in problem's folder; give a KernelBench-format .py file")
        shapes = [parse_shape(s) for s in args.shape]
        report = check_problem(ProblemCheck(problem=name, problem_source=source, device=args.device, dtype=args.dtype,
                                            shapes=shapes, timeout_s=args.timeout))
    except (ProblemFileError, ShapeError, ValueError) as exc:
        print(f"marathon problem: {exc}", file=sys.stderr)
        return 2
    except EvaluatorError as exc:
        print(f"marathon problem: infrastructure error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 3
    if report.bad_request:
        print(f"marathon problem: {report.bad_request}", file=sys.stderr)
        return 2
    print(json.dumps(report.model_dump(mode="json"), indent=2) if args.json else text(report))
    if not report.ok:
        print(_one_line(args.file, report.name, report.error or "a reference call failed"), file=sys.stderr)
        return 2
    return 0


def add_parser(sub) -> None:
    from cli.args import SECONDS
    pr = sub.add_parser("problem", help="check a KernelBench-format file before a run: its sizes and other constants, "
                                        "shape sets, the reference's output shape and time at each shape, its statement")
    pr.add_argument("file", metavar="FILE", help="a KernelBench-format .py file (class Model, get_inputs, get_init_inputs)")
    pr.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE,...",
                    help="run the reference at this shape instead (repeatable; any overridable constant, also "
                         "NAME[i] for an element of a tuple); default: smoke on the CPU, bench on CUDA")
    pr.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the reference runs (default: cpu)")
    pr.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"),
                    help="the inputs' dtype (default: the file's DTYPE, or float32)")
    pr.add_argument("--timeout", type=SECONDS, default=900.0, help="wall-clock seconds for the whole check (default: 900)")
    pr.add_argument("--json", action="store_true", help="print name, dimensions, constants, shapes, reference and "
                                                       "statement as one JSON object")
    pr.set_defaults(func=cmd_problem)
