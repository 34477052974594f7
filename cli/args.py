"""The parser's pieces every sub-command shares: one-line errors, checked numbers, and the flags that
describe a run (RunSpec) with their translation into one."""
from __future__ import annotations

import argparse
import re

from kernels.problems.spec import PROBLEM_NAMES, parse_shape, resolve_problem
from workflows import limits as L
from workflows.names import GPU_TASK_QUEUE

SERVER_WAIT_S = 600.0  # a restart of `marathon dev` takes seconds, a machine's reboot minutes


class Parser(argparse.ArgumentParser):
    """argparse, its errors on one line (the usage is one --help away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _number(kind: type, low: float, high: float | None = None, *, strict: bool = False):
    """An argparse type: a finite `kind` above `low` (or at least it, unless strict), at most `high`."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if (value <= low) if strict else (value < low):
            raise argparse.ArgumentTypeError(f"{text} must be {'above' if strict else 'at least'} {low:g}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{text} must be at most {high:g}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


PORT = _number(int, 1, 65535)
# the bounds of workflows/limits.py, the same the workflow checks its input against
HOURS = _number(float, 0, L.MAX_HOURS, strict=True)
SECONDS = _number(float, 0, L.MAX_TIMEOUT_S, strict=True)
TOOL_CALLS = _number(int, 1, L.MAX_TOOL_CALLS)
SPEEDUP = _number(float, 0, L.MAX_SPEEDUP, strict=True)
TURNS = _number(int, 1, L.MAX_TURNS)
TOKENS = _number(int, 1, L.MAX_TOKENS)
REPLY_TOKENS = _number(int, 1, L.MAX_REPLY_TOKENS)
PARALLEL = _number(int, 1, L.MAX_PARALLEL)
AGENTS = _number(int, 1, L.MAX_AGENTS)
SEEDS = _number(int, 1, L.MAX_SEEDS)
REPS = _number(int, 1, L.MAX_REPS)


def _shown(text: str) -> str:
    """A refused argument as an error line quotes it: its start, escaped, never a screenful."""
    return repr(text[:60]) + ("..." if len(text) > 60 else "")


_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def _host_ok(host: str) -> bool:
    """A host as the Temporal client's URL parser takes it: an IPv6 address in brackets, a dotted IPv4
    address, or a DNS name (labels of letters, digits, _ and -). A name whose last label is a number is
    read as an IPv4 address by that parser, so it must be one."""
    import ipaddress
    if host.startswith("[") or host.endswith("]"):
        inner = host[1:-1]
        if not (host.startswith("[") and host.endswith("]")) or "%" in inner or not inner:
            return False
        try:
            ipaddress.IPv6Address(inner)
        except ValueError:
            return False
        return True
    labels = host.split(".")
    if not host or len(host) > 253 or not all(_LABEL.fullmatch(x) for x in labels):
        return False
    if re.fullmatch(r"[0-9]+|0[xX][0-9A-Fa-f]*", labels[-1]):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
    return True


def ADDRESS(text: str) -> str:
    """An argparse type: a Temporal server's HOST:PORT (an IPv6 host in brackets), the port 1 to 65535.
    The one check of an address every command (and worker.py) makes, so that a malformed one is refused
    while the arguments are read, never by the client's URL parser later."""
    host, sep, port = text.rpartition(":")
    if not (sep and len(text) <= 300 and _host_ok(host) and re.fullmatch(r"[0-9]{1,5}", port)
            and 1 <= int(port) <= 65535):
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not HOST:PORT (a host name, an IPv4 address or an "
                                         f"IPv6 address in brackets; a port from 1 to 65535)")
    return text


ADDRESS.__name__ = "address"

MAX_GPUS = 256


def GPUS(text: str) -> str:
    """An argparse type: `auto`, `none`, or a list of GPU indices like 0,1 (each at most once)."""
    if text in ("auto", "none"):
        return text
    items = text.split(",")
    if not (len(text) <= 2000 and all(re.fullmatch(r"[0-9]{1,3}", x) and int(x) < MAX_GPUS for x in items)
            and len(set(items)) == len(items)):
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not auto, none, or a list of GPU indices like 0,1 "
                                         f"(each below {MAX_GPUS}, once)")
    return text


GPUS.__name__ = "GPU list"


def LISTEN_IP(text: str) -> str:
    """An argparse type: the address a server listens on: an IPv4 or IPv6 address, or localhost."""
    import ipaddress
    if text != "localhost":
        try:
            ipaddress.ip_address(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{_shown(text)} is not an IP address (127.0.0.1, 0.0.0.0, ::1) "
                                             "or localhost") from None
    return text


LISTEN_IP.__name__ = "IP address"


def FOLDER(text: str) -> str:
    """An argparse type: a folder the command may create or use (--state-dir, --artifacts): not a file,
    nor beneath one, checked before anything starts (a server, a run) that would fail on it later."""
    from pathlib import Path
    if not text or len(text) > 4096 or "\0" in text:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a folder's path")
    path = Path(text).expanduser()
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                where = "" if p == path else f" (under {str(p)!r}, which is)"
                raise argparse.ArgumentTypeError(f"{_shown(text)} is a file, not a folder{where}")
            break
    return text


FOLDER.__name__ = "folder"


def _name(what: str, pattern: str, max_chars: int, chars: str):
    """An argparse type: a non-empty name of at most `max_chars` characters matching `pattern` (`chars`
    says which, in the error line)."""
    rx = re.compile(pattern)

    def parse(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError(f"{what} is empty")
        if len(text) > max_chars:
            raise argparse.ArgumentTypeError(f"{what} of {len(text)} characters: at most {max_chars}")
        if not rx.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{_shown(text)} is not {what} ({chars})")
        return text
    parse.__name__ = what
    return parse


# Every id and name the CLI hands a Temporal server: a charset and a length checked as the arguments are read
NAMESPACE = _name("a namespace", r"[A-Za-z0-9][A-Za-z0-9._-]*", 255, "letters, digits, . _ -")
TASK_QUEUE_NAME = _name("a task queue", r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", L.MAX_NAME_CHARS, "letters, digits, _ . + -")
# a run's workflow id: a schedule's runs add -<time> (with colons), an agent's /agent-<i> (workflows/names.py)
WORKFLOW_ID = _name("a workflow id", r"[A-Za-z0-9_][A-Za-z0-9_.+:@=/-]*", 255, "letters, digits, _ . + : @ = / -")
# a schedule's id starts the workflow id of each run it starts (<id>-<time>): shorter than a workflow id
SCHEDULE_ID = _name("a schedule id", r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", L.MAX_NAME_CHARS, "letters, digits, _ . + -")
PROBLEM_NAME = _name("a problem's name", r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", L.MAX_NAME_CHARS, "letters, digits, _ . + -")


MAX_SINCE_DAYS = 3650  # `runs --since`: ten years reaches back past any run


def SINCE(text: str):
    """An argparse type: `runs --since` (90m, 24h, 3d, 1w), at most MAX_SINCE_DAYS days."""
    from datetime import timedelta

    from reports.runs import parse_since
    try:
        age = parse_since(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not an age (a number and a unit: 90m, 24h, 3d, "
                                         f"1w)") from None
    except OverflowError:
        age = None
    if age is None or age > timedelta(days=MAX_SINCE_DAYS):
        raise argparse.ArgumentTypeError(f"{_shown(text)} must be at most {MAX_SINCE_DAYS}d")
    return age


SINCE.__name__ = "age"


def _state_dir(path: str | None):
    from reports.local import state_dir
    return state_dir(path)


def _add_spec_flags(run, problem: str = "one") -> None:
    """The flags that describe a run (RunSpec): shared by `run`, `suite` and `schedule create`.
    problem: "one" (--problem), "suite" (--problems) or "either" (schedule create)."""
    which = run.add_mutually_exclusive_group(required=True)
    if problem in ("one", "either"):
        which.add_argument("--problem", help=f"a built-in problem ({', '.join(PROBLEM_NAMES)}), its folder, or a KernelBench-format .py file")
        which.add_argument("--task", metavar="DIR", help="a task instead of a kernel problem: a folder with task.toml "
                           "(a test suite's time, a bundle's size, a flaky test's failure rate: README, Your own target)")
    if problem in ("suite", "either"):
        which.add_argument("--problems", metavar="DIR_OR_GLOB",
                           help="a suite: one run per KernelBench-format file (each starting from <name>_kernel.py "
                                "beside it), as child workflows of one suite workflow")
        run.add_argument("--hours-each", type=HOURS, default=None, help="a suite's budget per problem (default: --hours)")
    run.add_argument("--kernel", default="starter", help="the starting kernel: a shipped kernel's name or a file")
    run.add_argument("--policy", choices=("llm", "tuner"), default=None,
                     help="default: llm when --model is given, otherwise tuner")
    run.add_argument("--model", default=None, help="model name at the endpoint")
    run.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint (vLLM, SGLang, Ollama, ...)")
    run.add_argument("--api-key-env", default="OPENAI_API_KEY",
                     help="the NAME of the environment variable (in the workers) that holds the key")
    run.add_argument("--max-tokens", type=REPLY_TOKENS, default=8192,
                     help="tokens one model reply may use (the model's window must hold --context-budget plus this)")
    run.add_argument("--tool-choice", choices=("auto", "required"), default="auto",
                     help="required: every reply must call a tool (for small models that answer in prose)")
    run.add_argument("--hours", type=HOURS, default=24.0)
    run.add_argument("--max-tool-calls", type=TOOL_CALLS, default=1000)
    run.add_argument("--target-speedup", type=SPEEDUP, default=None, help="stop once the best kernel reaches this")
    run.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    run.add_argument("--shapes", default=None, choices=("smoke", "bench", "sweep"),
                     help="default: smoke on the CPU, bench on CUDA")
    run.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE,...")
    run.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"),
                     help="the inputs' dtype (default: the problem's; float32 for a KernelBench file, or its DTYPE)")
    run.add_argument("--timeout", type=SECONDS, default=600.0, help="wall-clock seconds for one candidate's process")
    run.add_argument("--parallel", type=PARALLEL, default=1,
                     help="tuner: configurations profiled at once, one per GPU worker (`marathon dev --gpus auto` "
                          "starts one per GPU; an embedded run has one); a suite: problems run at once")
    run.add_argument("--agents", type=AGENTS, default=1,
                     help="islands: this many agents as child workflows of the run, each with its own context and "
                          "a share of the tool calls, sharing the best kernel and the failures (the tuner splits "
                          "its space among them)")
    run.add_argument("--no-sweep-check", action="store_true",
                     help="do not test the best kernel on the problem's sweep shapes after the run (a CUDA run does)")
    run.add_argument("--hint", action="append", default=[], help="a hint for the model (repeatable)")
    run.add_argument("--compact-every", type=TURNS, default=40, help="tool calls between compactions")
    run.add_argument("--context-budget", type=TOKENS, default=48000, help="tokens a prompt may use")
    run.add_argument("--memory-from", default=None, metavar="REPORT.json",
                     help="start from the memory of an earlier run's --json report (e.g. a tuner run's)")
    run.add_argument("--gpu-task-queue", type=TASK_QUEUE_NAME, default=GPU_TASK_QUEUE)


def _label(file_name: str) -> str:
    """A file's name as a workflow input's name for what it held (letters, digits, _ . + -)."""
    import re
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", file_name).lstrip(".~") or "file"


def spec_from_args(args: argparse.Namespace):
    """The RunSpec the flags describe (the same JSON `temporal workflow start --input` takes)."""
    from pydantic import ValidationError

    from workflows.models import describe_invalid

    try:
        return _spec_from_args(args)
    except ValidationError as err:  # the models' constraints, e.g. eval.timeout_s for --timeout
        raise ValueError(describe_invalid(err)) from None


def _model_settings(args: argparse.Namespace):
    from workflows.models import ModelSettings
    model = ModelSettings(model=args.model or "", base_url=args.base_url, api_key_env=args.api_key_env,
                          max_tokens=args.max_tokens, tool_choice=args.tool_choice)
    if args.policy == "llm" and not model.configured:
        raise ValueError("--policy llm needs --model (and --base-url for a non-OpenAI endpoint)")
    return model


def _task_spec(args: argparse.Namespace):
    """A task's run: the folder read here, its spec and text files carried in the input."""
    from tasks.spec import TaskError, load_task
    from workflows.models import Budgets, EvalSettings, RunSpec
    try:
        bundle = load_task(args.task)
    except TaskError as exc:
        raise ValueError(f"--task: {exc}") from None
    if args.kernel != "starter":
        raise ValueError("--kernel: a task starts from its own files (give changes to them as the task's files)")
    if args.shape or args.shapes:
        raise ValueError("--shape/--shapes: a task has no shapes")
    if getattr(args, "dtype", None):
        raise ValueError("--dtype: a task has no inputs of a dtype")
    return RunSpec(problem=bundle.spec.name, task=bundle, policy=args.policy, model=_model_settings(args),
                   budgets=Budgets(hours=args.hours, max_tool_calls=args.max_tool_calls,
                                   target_speedup=args.target_speedup),
                   eval=EvalSettings(device="cpu", timeout_s=args.timeout, parallel=args.parallel, sweep_best=False),
                   hints=list(args.hint), compact_every=args.compact_every, context_budget=args.context_budget,
                   gpu_task_queue=args.gpu_task_queue, agents=args.agents)


def given_shape(spec, given: dict[str, int]) -> dict[str, int]:
    """A --shape as a run's input holds it, checked against the problem: a built-in problem's whole
    shape; a file problem's values as given (the others keep the file's; its process tells the sizes)."""
    full = spec.shape(given)
    return dict(given) if spec.source is not None else full


def _spec_from_args(args: argparse.Namespace):
    from pathlib import Path

    from pydantic import ValidationError

    from kernels import user_file
    from kernels.problems.spec import get_problem
    from workflows.models import Budgets, EvalSettings, RunSpec, describe_invalid

    if getattr(args, "task", None):
        return _task_spec(args)
    name, problem_source = resolve_problem(args.problem)
    if problem_source is not None:
        name = _label(name)
    spec = get_problem(name, problem_source)
    if problem_source is not None and args.kernel == "starter":
        raise ValueError(f"--kernel: a problem file ({name}) ships no starter; give a candidate file with ModelNew")
    # the workflow input carries a kernel of the user's as its text, labelled with its file's name: the
    # workers read no file an input names
    kernel, source = args.kernel, None
    if kernel not in spec.shipped_kernels:
        path = Path(kernel)
        if not path.is_file():
            raise ValueError(f"--kernel {kernel!r} is neither a file nor a shipped kernel of {args.problem} "
                             f"({', '.join(spec.shipped_kernels)})")
        source = user_file.read_text(path, "--kernel")
        kernel = _label(path.name)
    model = _model_settings(args)
    policy = args.policy
    memory = None
    if args.memory_from:
        from compaction.memory import Memory
        from workflows.models import RunReport
        text = user_file.read_text(args.memory_from, "--memory-from", user_file.MAX_REPORT_BYTES)
        try:
            report = RunReport.model_validate_json(text)
        except ValidationError as exc:
            raise ValueError(f"--memory-from {args.memory_from!r}: not a run's report.json "
                             f"({describe_invalid(exc)[:200]})") from None
        if report.memory is None:
            raise ValueError(f"{args.memory_from} holds no memory")
        memory = Memory.model_validate(report.memory.model_dump())
    return RunSpec(problem=name, problem_source=problem_source, kernel=kernel, source=source,
                   policy=policy, model=model, memory=memory,
                   budgets=Budgets(hours=args.hours, max_tool_calls=args.max_tool_calls,
                                   target_speedup=args.target_speedup),
                   eval=EvalSettings(device=args.device, shapes=args.shapes, dtype=args.dtype,
                                     shape_list=[given_shape(spec, parse_shape(s)) for s in args.shape],
                                     timeout_s=args.timeout, parallel=args.parallel,
                                     sweep_best=not args.no_sweep_check),
                   hints=list(args.hint), compact_every=args.compact_every, context_budget=args.context_budget,
                   gpu_task_queue=args.gpu_task_queue, agents=args.agents)
