"""The bookkeeping tools, as plain functions: write_kernel, edit_kernel, show_kernel, list_attempts,
note, and the run's preparation. No Temporal here; `activities/registry.py` wraps them.

A tool's misuse (an edit whose old text is missing, an oversized source) is an answer with ok=False
that the model reads; only infrastructure faults raise."""
from __future__ import annotations

import ast
import difflib

from activities.artifacts import ArtifactStore, capped
from kernels.problems.kernelbench import FileFacts, full_shape
from kernels.problems.spec import get_problem
from kernels.problems.tunables import TunablesError, read_tunables
from tasks import document as task_document
from tasks import tunables as task_tunables
from kernels.labels import kv
from workflows.records import TASK_BASELINE
from workflows.models import (Attempt, EditInput, ListInput, NoteInput, PrepareInput, RunSetup, ShowInput,
                              SourceRef, ToolResult, WriteInput)


def prepare_task(inp: PrepareInput, store: ArtifactStore) -> RunSetup:
    """A task's run: its files, as one text, are the start; its bundle goes into the store once, and
    the evaluations find it there by key."""
    bundle = inp.task
    start = task_document.join(bundle.starting_files())
    found = task_tunables.read_tunables(bundle, start)
    return RunSetup(problem=bundle.spec.name, entry_point="", statement=task_statement(bundle),
                    kernel_label=TASK_BASELINE, start=source_ref(start, store, inp.inline_source_cap),
                    device="cpu", shape_set=None, shapes=[], baselines=[TASK_BASELINE],
                    tunables={k: list(v) for k, v in found[0].items()} if found else None,
                    config=found[1] if found else None, task_key=store.put(bundle.model_dump_json()))


def task_statement(bundle) -> str:
    """What the model reads about a task: its statement, the figure to improve, the guard, the files
    it may change, and how a candidate is written."""
    spec = bundle.spec
    m = spec.metric
    figure = {"wall_time": f"the wall time of `{m.command}`",
              "failure_rate": f"the fraction of runs of `{m.command}` that fail"}.get(
        m.read, f"the figure `{m.command}` prints ({m.read})")
    guard = (f"`{spec.guard.command}` must pass (exit 0)" + (f" and print {spec.guard.expect!r}" if spec.guard.expect else "")
             if spec.guard else "there is no guard")
    return (f"# Task {spec.name}\n\n{spec.statement.strip()}\n\n"
            f"The figure: {figure}; {'lower' if m.direction == 'lower' else 'higher'} is better"
            + (f" ({m.shown_unit})" if m.shown_unit else "") + f". Measured {spec.repeat} times against the task's own "
            f"files in the same call, runs interleaved; the median counts"
            + (" (the fraction of failed runs)" if m.read == "failure_rate" else "") + f".\n"
            f"The guard: {guard}; a candidate that fails it does not count.\n"
            f"You may change only these files: {', '.join(spec.files)} (new files matching them too). Each "
            f"command runs in a fresh copy of the task's folder with no network, and at most {spec.timeout_s:g} s.\n\n"
            f"A candidate is one text holding the files you change, each under a line `{task_document.HEADER}<path>`; "
            f"a file you leave out keeps the task's version. The task's own files:\n\n"
            + task_document.join(bundle.starting_files()))


def source_ref(text: str, store: ArtifactStore, inline_cap: int) -> SourceRef:
    key = store.put(text)
    return SourceRef(sha256=key, text=text if len(text) <= inline_cap else None, lines=text.count("\n") + 1)


def source_text(ref: SourceRef, store: ArtifactStore) -> str:
    if ref.text is not None:
        return ref.text
    return store.get(ref.sha256)  # checks the content against its key


def _checks(source: str, entry_point: str) -> tuple[list[str], dict | None]:
    """Quick static feedback on a new candidate: it parses, defines the entry point, its tunables. A
    task's candidate (no entry point) is a text of files: is it one?"""
    warnings: list[str] = []
    config = None
    if not entry_point:
        try:
            task_document.split(source)
        except task_document.DocumentError as exc:
            warnings.append(f"warning: {exc}; evaluations will reject it")
        return warnings, None
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [f"warning: it does not parse (line {exc.lineno}: {exc.msg}); compile_kernel will fail"], None
    if not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == entry_point for n in tree.body):
        warnings.append(f"warning: no top-level `def {entry_point}(...)` or `class {entry_point}`: the evaluator "
                        "calls that entry point")
    try:
        found = read_tunables(source)
        if found:
            config = found[1]
    except TunablesError as exc:
        warnings.append(f"warning: {exc}")
    return warnings, config


def _new_candidate(source: str, attempt: int, entry_point: str, store: ArtifactStore, inline_cap: int,
                   max_bytes: int, output_cap: int, what: str, extra: str = "") -> ToolResult:
    size = len(source.encode())
    if not source.strip():
        return ToolResult(ok=False, text="refused: the source is empty")
    if size > max_bytes:
        return ToolResult(ok=False, text=f"refused: the source is {size} bytes; the limit is {max_bytes}")
    ref = source_ref(source, store, inline_cap)
    warnings, config = _checks(source, entry_point)
    lines = [f"{what} attempt {attempt}: {ref.lines} lines, sha256 {ref.sha256[:12]}. It is now the current "
             f"candidate: compile_kernel, test_kernel and profile_kernel act on it."]
    if config is not None:
        lines.append("CONFIG: " + kv(config, ", ", repr))
    lines += warnings
    if extra:
        lines.append(extra)
    text, key = capped("\n".join(lines), output_cap, store)
    return ToolResult(text=text, artifact=key, source=ref, config=config)


def write_kernel(inp: WriteInput, store: ArtifactStore) -> ToolResult:
    return _new_candidate(inp.source, inp.attempt, inp.entry_point, store, inp.inline_cap, inp.max_bytes,
                          inp.output_cap, "wrote")


def edit_kernel(inp: EditInput, store: ArtifactStore) -> ToolResult:
    current = source_text(inp.current, store)
    if not inp.old:
        return ToolResult(ok=False, text="refused: `old` is empty; give the exact text to replace")
    count = current.count(inp.old)
    if count == 0:
        hint = ""
        first = inp.old.strip().splitlines()[0] if inp.old.strip() else ""
        close = difflib.get_close_matches(first, current.splitlines(), n=1, cutoff=0.6) if first else []
        if close:
            hint = f" The closest line is: {close[0].strip()!r}."
        return ToolResult(ok=False, text="refused: `old` does not occur in the current candidate; it must match "
                          f"exactly, whitespace included (show_kernel shows the source).{hint}")
    if count > 1:
        return ToolResult(ok=False, text=f"refused: `old` occurs {count} times; include more context so it is unique")
    new_source = current.replace(inp.old, inp.new, 1)
    diff = "".join(difflib.unified_diff(current.splitlines(keepends=True), new_source.splitlines(keepends=True),
                                        "before", "after", n=1))
    return _new_candidate(new_source, inp.attempt, inp.entry_point, store, inp.inline_cap, inp.max_bytes,
                          inp.output_cap, "edited into", extra="diff:\n" + diff[:2000])


def show_kernel(inp: ShowInput, store: ArtifactStore) -> ToolResult:
    source = source_text(inp.source, store)
    text, key = capped(f"{inp.label} (sha256 {inp.source.sha256[:12]}, {inp.source.lines} lines):\n"
                       f"```python\n{source}\n```", inp.output_cap, store)
    return ToolResult(text=text, artifact=key)


def _attempt_row(a: Attempt, best: int | None, current: int | None) -> str:
    e = a.best_eval() or (a.evals[-1] if a.evals else None)
    mark = ("*" if a.n == best else " ") + (">" if a.n == current else " ")
    speed = f"{e.speedup:.3g}x vs {e.baseline}" if e and e.speedup is not None else "-"
    lat = f"{e.latency_us:.1f}us" if e and e.latency_us is not None else "-"
    origin = a.origin + (f" of {a.parent}" if a.parent is not None else "")
    cfg = " " + kv(a.config) if a.config else ""
    status = e.status if e else "unevaluated"
    return f"{mark}{a.n:>5}  {origin:<14} {status:<13} {speed:<22} {lat:<12}{cfg}"


def list_attempts(inp: ListInput, store: ArtifactStore) -> ToolResult:
    head = (f"{inp.total} attempts" + (f"; best: {inp.best}" if inp.best is not None else "; no ok kernel yet")
            + (f"; current: {inp.current}" if inp.current is not None else "")
            + (f"; showing the last {len(inp.attempts)}" if len(inp.attempts) < inp.total else ""))
    rows = [head, "  (* best, > current)", f"     {'#':>4}  {'origin':<14} {'status':<13} {'speedup':<22} {'latency':<12}"]
    rows += [_attempt_row(a, inp.best, inp.current) for a in inp.attempts]
    text, key = capped("\n".join(rows), inp.output_cap, store)
    return ToolResult(text=text, artifact=key)


def note(inp: NoteInput, store: ArtifactStore) -> ToolResult:
    text = inp.text.strip()
    if not text:
        return ToolResult(ok=False, text="refused: the note is empty")
    key = store.put(text)
    return ToolResult(text=f"noted ({len(text)} characters); notes are kept in the run's memory", artifact=key)


def _file_problem_setup(inp: PrepareInput, spec, statement: str, shape_set: str | None, shapes: list):
    """A file problem's statement (its sizes apart from its other constants) and the shapes its runs
    are judged on, told by its fenced process (kernels/evaluator/evaluate.py check_problem: the file's
    code never runs here). A problem that fails there is a bad run input (ValueError); a worker that
    cannot start that process keeps the file's text alone, and the first evaluation tells the shapes."""
    from kernels.evaluator.evaluate import EvaluatorError, ProblemCheck, check_problem
    from kernels.problems.kernelbench import statement as file_statement
    try:
        report = check_problem(ProblemCheck(problem=spec.name, problem_source=spec.source, device="cpu",
                                            dtype=inp.eval.dtype, shapes=list(inp.eval.shape_list),
                                            run_reference=False, need_smoke=inp.eval.device == "cpu",
                                            timeout_s=600.0))
    except EvaluatorError:
        return statement, None, [] if not inp.eval.shape_list else shapes
    if report.bad_request or report.error:
        raise ValueError(f"the problem cannot be judged: {report.bad_request or report.error}")
    facts = FileFacts(name=spec.name, sizes=report.dimensions, constants=report.constants)
    statement = file_statement(spec.name, spec.source, facts)
    if inp.eval.shape_list:
        given = [{k: v for k, v in s.items() if v != spec.defaults.get(k)} for s in shapes]
        return statement, None, [full_shape(report.dimensions, g) for g in given]
    if shape_set in report.shapes:
        return statement, shape_set, report.shapes[shape_set]
    return statement, shape_set, shapes


def prepare(inp: PrepareInput, store: ArtifactStore) -> RunSetup:
    """Resolve what the workflow may not read itself: the statement, the starting source, the shapes."""
    if inp.task is not None:
        return prepare_task(inp, store)
    spec = get_problem(inp.problem, inp.problem_source)
    if inp.source is not None:
        label, source = (inp.kernel if inp.kernel and inp.kernel != "starter" else "inline"), inp.source
    elif inp.kernel in spec.shipped_kernels:  # a name only: this worker reads no file an input names
        label, source = inp.kernel, spec.kernel_path(inp.kernel).read_text()
    else:
        shipped = f"its shipped kernels: {', '.join(spec.shipped_kernels)}" if spec.shipped_kernels else "it ships none"
        raise ValueError(f"kernel: {inp.kernel!r} is not a shipped kernel of {spec.name} ({shipped}); a kernel "
                         f"of your own travels as its text in `source`")
    try:
        statement = spec.statement
    except OSError:
        statement = f"Implement `{spec.entry_point}` for the {spec.name} problem in Triton."
    if inp.eval.shape_list:
        shapes = [spec.shape(s) for s in inp.eval.shape_list]
        shape_set = None
    elif inp.eval.shapes or inp.eval.device in ("cpu", "cuda"):
        shape_set = inp.eval.shapes or ("smoke" if inp.eval.device == "cpu" else "bench")
        shapes = spec.shapes(shape_set)
    else:  # device auto: the GPU worker decides (smoke on a CPU, bench on CUDA); known after an evaluation
        shape_set, shapes = None, []
    if spec.source is not None:
        statement, shape_set, shapes = _file_problem_setup(inp, spec, statement, shape_set, shapes)
    tunables = config = None
    try:
        found = read_tunables(source)
        if found:
            tunables, config = found
    except TunablesError:
        pass
    return RunSetup(problem=spec.name, entry_point=spec.entry_point, statement=statement, kernel_label=label,
                    start=source_ref(source, store, inp.inline_source_cap), device=inp.eval.device,
                    shape_set=shape_set, shapes=shapes, baselines=[],  # filled in from the first timed verdict
                    tunables={k: list(v) for k, v in tunables.items()} if tunables else None, config=config)
