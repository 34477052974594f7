"""A run's report folder, from its RunFacts:

    report.html        one self-contained page (plots inlined as PNG, no network)
    report.md          the same facts as text
    attempts.csv       one row per attempt
    notebook.md        the run's lab notebook
    best_verdict.json  the best kernel's full verdict (`marathon eval --json` form)
    best_kernel.py     the best kernel's exact source under a header comment; judged as it is
    <problem>.py       a KernelBench-format problem's source (the judge-again command names it)

The folder is written whole into a temporary sibling and moved into place, so a reader never sees half
of it; a folder that holds anything but an earlier report of the same run is refused."""
from __future__ import annotations

import csv
import difflib
import io
import json
import shutil
import tempfile
from pathlib import Path

import jinja2

from kernels.labels import shape_label
from reports import fmt
from reports.collect import RunFacts
from reports.local import safe_name
from reports.plots import STATUS_COLOURS, metric, progress_png, shapes_png

MARKER = ".marathon-report"  # names the run a report folder belongs to
TEMPLATES = Path(__file__).resolve().parent / "templates"


def problem_file(facts: RunFacts) -> str:
    """The file name a KernelBench-format problem's source gets in the folder: its own name, so that a
    verdict judged from it names the same problem."""
    return safe_name(facts.problem) + ".py"


def judge_command(facts: RunFacts) -> str:
    """The command that judges best_kernel.py again, run from the report folder: same problem, device
    and shapes as the run's verdict. A task's: best.patch measured again against the task's folder."""
    if facts.task is not None:
        return f"marathon eval --task TASK_FOLDER --patch best.patch   (TASK_FOLDER: the folder of task {facts.task.spec.name})"
    v = facts.best_verdict
    problem = problem_file(facts) if facts.problem_source else facts.problem
    parts = ["marathon", "eval", "--problem", problem, "--kernel", "best_kernel.py"]
    if v is not None:
        parts += ["--device", "cuda" if v.device.startswith("cuda") else "cpu"]
        if facts.problem_source and v.dtype:
            parts += ["--dtype", v.dtype]
        for r in v.shapes:
            parts += ["--shape", shape_label(r.shape)]
    return " ".join(parts)


def task_patch(facts: RunFacts) -> str:
    """The best attempt of a task's run as a diff of the task's files (`git apply` or `patch -p1` in the
    task's folder), or a note when its text is not a set of files the task lets change."""
    from tasks import document
    try:
        return document.patch(facts.task, document.candidate_files(facts.task, facts.best_source))
    except document.DocumentError as exc:
        return f"# the best attempt's text is not a patch of the task: {exc}\n"


def kernel_header(facts: RunFacts) -> str:
    b, v = facts.best, facts.best_verdict
    assert b is not None and v is not None
    lines = [f"kernel-marathon: the best kernel of run {facts.workflow_id} (attempt {b.attempt})",
             f"problem: {facts.problem}" + (f" ({facts.start_label} start)" if facts.start_label else ""),
             f"verdict: {v.status} on {v.device}" + (f", dtype {v.dtype}" if v.dtype else "") + f": {v.reason}"]
    for r in v.shapes:
        sp = ", ".join(f"{k} {fmt.speedup(x)}" for k, x in r.speedup.items()) or "no baseline timed"
        lat = fmt.duration_us(r.latency_us) if r.latency_us is not None else "untimed"
        lines.append(f"  shape {shape_label(r.shape)}: {lat}; speedup {sp}")
    if b.speedup is not None:
        lines.append(f"headline speedup (worst shape, strongest baseline): {fmt.speedup(b.speedup)}")
    if not v.timing_meaningful:
        lines.append(fmt.CPU_TIMES)
    gpu = f"{v.gpu.name}, driver {v.gpu.driver}" if v.gpu else "none (CPU)"
    lines += [f"GPU: {gpu}; torch {v.versions.get('torch', '?')}, triton {v.versions.get('triton', '?')}",
              f"date: {facts.ended_at or facts.generated_at:%Y-%m-%d %H:%M UTC}; workflow {facts.workflow_id}",
              "judge it again (from this folder):", f"  {judge_command(facts)}"]
    return "".join(f"# {x}\n" for x in lines) + "\n"


def kernel_diff(facts: RunFacts) -> str:
    if facts.best_source is None or facts.start_source is None:
        return ""
    return "".join(difflib.unified_diff(facts.start_source.splitlines(keepends=True),
                                        facts.best_source.splitlines(keepends=True),
                                        fromfile="start", tofile=f"best (attempt {facts.best.attempt})"))


def attempts_csv(facts: RunFacts) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["attempt", "origin", "parent", "tool_call", "hours", "status", "evaluations", "speedup", "baseline",
                "latency_us", "roofline_pct", "config", "reason"])
    for a in facts.attempts:
        w.writerow([a.n, a.origin, "" if a.parent is None else a.parent, a.tool_call,
                    "" if a.hours is None else f"{a.hours:.4f}", a.status, a.evaluations,
                    "" if a.speedup is None else a.speedup, a.baseline or "",
                    "" if a.latency_us is None else a.latency_us,
                    "" if a.roofline_pct is None else a.roofline_pct,
                    json.dumps(a.config, sort_keys=True) if a.config else "", a.reason])
    return buf.getvalue()


def best_rule(facts: RunFacts) -> str:
    """On a CPU, how the best was chosen, from what the run measured: the lowest interpreter time, or
    else the speedup, whose ranking is noise there. Empty on a GPU."""
    b = facts.best
    if b is None or not facts.cpu:
        return ""
    fastest = facts.fastest_attempt()
    if fastest is None or fastest.n == b.attempt:
        return "the correct kernel with the lowest interpreter time"
    return (f"chosen by its speedup, noise on a CPU (attempt {fastest.n} had the lowest interpreter time, "
            f"{fmt.duration_us(fastest.latency_us)})")


def outcome(facts: RunFacts) -> str:
    """The run's outcome in one sentence: what the top of every output says."""
    step = f": {facts.step}" if facts.step and facts.step != facts.phase else ""
    state = "finished" if facts.finished else f"still going ({facts.phase}{step})"
    if facts.temporal_status not in ("RUNNING", "COMPLETED"):
        state = f"ended {facts.temporal_status.lower()}"
    evals = len(facts.evaluations)
    if facts.best is None:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(facts.status_counts().items()))
        every = "its one evaluation" if evals == 1 else f"every one of its {evals} evaluations"
        best = f"no kernel passed: {every} failed ({counts})" if evals else "no kernel evaluated yet"
    else:
        b = facts.best
        row = next((a for a in facts.attempts if a.n == b.attempt), None)
        if facts.cpu:
            lat = (f" ({fmt.duration_us(row.latency_us)} in the CPU's interpreter, geometric mean over "
                   f"{len(b.verdict.shapes)} shapes)" if row and row.latency_us else "")
            best = f"best: attempt {b.attempt}{lat}, {best_rule(facts)}"
        elif b.speedup is not None and b.verdict.metric is not None:
            best = (f"best: attempt {b.attempt} at {fmt.speedup(b.speedup)} better than the task's own files "
                    f"({b.verdict.metric.name}: {b.verdict.metric.value:.4g}{' ' + b.verdict.metric.unit if b.verdict.metric.unit else ''} "
                    f"against {b.verdict.metric.baseline:.4g})")
        elif b.speedup is not None:
            best = (f"best: attempt {b.attempt} at {fmt.speedup(b.speedup)} against {facts.best_baseline_name()} "
                    f"(its worst shape, against the strongest baseline)")
        else:
            best = f"best: attempt {b.attempt} (no baseline timed)"
    why = f" ({facts.stop_reason})" if facts.stop_reason else ""
    return f"{facts.problem}, {facts.policy} policy: {state}{why}; {best}"


def _env() -> jinja2.Environment:
    # report.html.j2 escaped: reasons, notebook lines and kernel sources are the candidate's text
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             autoescape=jinja2.select_autoescape(["html", "html.j2"]),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["shape"] = shape_label
    env.filters["num"] = lambda x, f=".3g": "" if x is None else format(x, f)
    env.filters["dur"] = fmt.duration_us
    env.filters["x"] = fmt.speedup
    return env


def shape_title(a) -> str:
    """An attempt's per-shape latencies, for the hover text of its latency."""
    return "; ".join(f"{s.shape}: {fmt.duration_us(s.latency_us) or 'untimed'}"
                     + "".join(f", {k} {fmt.duration_us(us)}" for k, us in sorted(s.baselines.items()))
                     for s in a.shapes)


SPREAD_WORTH_SAYING = 1.2  # a baseline reused from the worker's cache reads the same each time


def baseline_spread(facts: RunFacts) -> str:
    """How far apart one baseline's readings of one shape were across the run's evaluations (its widest):
    on a CPU, the page shows the noise it warns of with the run's own figures."""
    seen: dict[tuple[str, str], list[float]] = {}
    for a in facts.attempts:
        for s in a.shapes:
            for k, us in s.baselines.items():
                seen.setdefault((k, s.shape), []).append(us)
    spread = [(max(v) / min(v), k, shape, min(v), max(v)) for (k, shape), v in seen.items() if len(v) > 1 and min(v) > 0]
    if not spread or max(spread)[0] < SPREAD_WORTH_SAYING:
        return ""
    _, k, shape, low, high = max(spread)
    return f"{k} on {shape} read from {fmt.duration_us(low)} to {fmt.duration_us(high)} across this run's evaluations"


def _context(facts: RunFacts) -> dict:
    v = facts.best_verdict
    floors = bool(v and any(r.floor_us is not None for r in v.shapes))
    rooflines = bool(v and any(r.roofline_pct is not None for r in v.shapes))
    return {"f": facts, "outcome": outcome(facts), "diff": kernel_diff(facts), "judge": judge_command(facts),
            "colours": STATUS_COLOURS, "metric": metric(facts), "counts": facts.status_counts(),
            "cpu_times": fmt.CPU_TIMES, "best_rule": best_rule(facts), "spread": baseline_spread(facts),
            "floors": floors, "rooflines": rooflines,
            "shape_title": shape_title, "shape_count": len(facts.shapes) or (len(v.shapes) if v else 0)}


def render_html(facts: RunFacts) -> str:
    return _env().get_template("report.html.j2").render(progress=progress_png(facts), shapes=shapes_png(facts),
                                                         **_context(facts))


def render_md(facts: RunFacts) -> str:
    return _env().get_template("report.md.j2").render(**_context(facts))


def check_out_dir(out: Path, workflow_id: str) -> None:
    """ValueError unless `out` is absent, empty, or an earlier report of this run (then replaced)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
    if not any(out.iterdir()):
        return
    marker = out / MARKER
    owner = marker.read_text(encoding="utf-8").strip() if marker.is_file() else None
    if owner != workflow_id:
        what = f"the report of another run ({owner})" if owner else "something other than a report"
        raise ValueError(f"--out {out} holds {what}; give an empty or new folder")


def write_report(facts: RunFacts, out: Path) -> Path:
    """Write the report folder at `out` (see the module docstring); returns the path of report.html."""
    files = {"report.html": render_html(facts), "report.md": render_md(facts),
             "attempts.csv": attempts_csv(facts),
             "notebook.md": f"# Lab notebook of {facts.workflow_id}\n\n" + "".join(f"- {x}\n" for x in facts.notebook)}
    if facts.best is not None:
        files["best_verdict.json"] = facts.best.verdict.model_dump_json(indent=2) + "\n"
        if facts.best_source is not None and facts.task is not None:
            files["best.patch"] = task_patch(facts)
        elif facts.best_source is not None:
            files["best_kernel.py"] = kernel_header(facts) + facts.best_source
    if facts.problem_source:
        files[problem_file(facts)] = facts.problem_source
    return write_report_folder(out, facts.workflow_id, files)


def write_report_folder(out: Path, workflow_id: str, files: dict[str, str]) -> Path:
    """Put `files` (name: text) at `out` as a whole: written beside it, then swapped in, so a reader
    never sees half a report; a folder of another run's report (or of anything else) is refused.
    Returns the path of report.html."""
    out = Path(out)
    check_out_dir(out, workflow_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for name, text in {**files, MARKER: workflow_id + "\n"}.items():
            (tmp / name).write_text(text, encoding="utf-8")
        if out.exists():
            old = out.with_name(f".{out.name}-old")
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "report.html"
