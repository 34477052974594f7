"""The tables `marathon` prints: a verdict (`eval`), a run's report (`run`, `follow`) and a suite's; and
the live progress line. Figures read as reports.fmt writes them (µs/ms, three significant figures)."""
from __future__ import annotations

import math

from kernels.evaluator.verdict import Verdict
from kernels.labels import config_label, shape_label
from reports.fmt import CPU_TIMES, duration_us, speedup
from workflows.records import TASK_BASELINE

CPU_LINE = f"CPU: {CPU_TIMES}"


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def task_verdict_table(v: Verdict) -> str:
    """A task's verdict: its figure and the task's own files', each run's sample, the files it changes."""
    m = v.metric
    unit = f" {m.unit}" if m.unit else ""
    lines = [f"task {v.problem} / {v.kernel}: {v.status.upper()}", f"  {v.reason}"]
    if m.samples:
        lines.append(f"  {m.name}, {m.direction} is better: {', '.join(f'{x:.4g}' for x in m.samples)}{unit} against "
                     f"the task's own {', '.join(f'{x:.4g}' for x in m.baseline_samples)}{unit}")
    if m.changed:
        lines.append(f"  files it changes: {', '.join(m.changed)}")
    missing = [k for k, ok in v.sandbox.items() if ok is False]
    if missing:
        lines.append(f"  fences missing on this machine: {', '.join(missing)}")
    lines.append(f"  {v.elapsed_s:.1f} s")
    if v.status != "ok":
        for title, text in (("guard output (tail)", m.guard_tail), ("metric output (tail)", v.log_tail)):
            if text.strip():
                lines += ["", f"  {title}:"] + ["    " + x for x in text.strip().splitlines()[-20:]]
    return "\n".join(lines)


def verdict_table(v: Verdict) -> str:
    if v.metric is not None:
        return task_verdict_table(v)
    lines = [f"{v.problem} / {v.kernel} on {v.device}" + (f" ({v.gpu.name}, driver {v.gpu.driver})" if v.gpu else "")
             + f": {v.status.upper()}", f"  {v.reason}"]
    cpu = not v.timing_meaningful and any(r.latency_us for r in v.shapes)
    if cpu:
        lines.append(f"  {CPU_LINE}")
    if v.shapes:
        rows = []
        for r in v.shapes:
            graph = r.timing.graph_median_us if r.timing and r.timing.graph_median_us else None
            wall = r.timing.sync_wall_us if r.timing and r.timing.sync_wall_us else None
            sp = "  ".join(f"{k} {speedup(x)} ({duration_us(r.baselines[k])})" for k, x in r.speedup.items())
            rows.append((shape_label(r.shape), "yes" if r.correct else "no",
                         f"{r.rel_err:.2e}" if r.rel_err is not None else "-", duration_us(r.latency_us) or "-",
                         duration_us(graph) or "-", duration_us(wall) or "-",
                         f"{r.roofline_pct:.1f}%" if r.roofline_pct is not None else "-", sp))
        head = ("shape", "ok", "rel_err", "latency", "graph", "wall", "roofline", "speedups (baseline latency)")
        # the columns a verdict fills (a CPU's has no graph, wall or roofline)
        shown = [i for i in range(len(head)) if i < 4 or i == 7 or any(row[i] != "-" for row in rows)]
        widths = [max(len(head[i]), *(len(row[i]) for row in rows)) for i in range(len(head))]

        def cells(row) -> str:
            return " ".join(f"{row[i]:<{widths[i]}}" if i in (0, 1, 7) else f"{row[i]:>{widths[i]}}"
                            for i in shown).rstrip()

        lines += ["", "  " + cells(head)] + ["  " + cells(row) for row in rows]
    if not cpu and any(r.timing and r.timing.sync_wall_us for r in v.shapes):
        lines.append("  (latency: device time per call, L2 flushed; graph: as a CUDA graph; wall: one call between "
                     "two device synchronisations, host launch cost included)")
    if v.shapes and v.best_speedup() is not None and not cpu:
        lines.append(f"  headline: {speedup(v.best_speedup())}, the worst shape against the strongest baseline")
    lines += [f"  flag: {f}" for f in v.flags]
    spent = ", ".join(f"{k} {t:.1f}" for k, t in sorted(v.phases_s.items(), key=lambda kv: -kv[1]) if t >= 0.05)
    lines.append(f"  torch {v.versions.get('torch')}, triton {v.versions.get('triton')}, {v.elapsed_s:.1f} s"
                 + (f" ({spent})" if spent else ""))
    if v.status != "ok" and v.log_tail.strip():
        lines += ["", "  candidate output (tail):"] + ["    " + x for x in v.log_tail.strip().splitlines()[-20:]]
    return "\n".join(lines)


def best_line(attempt: int, speedup_: float | None, verdict: Verdict | None,
              fastest: tuple[int, float] | None = None) -> str:
    """What the best is, in words: on a GPU its speedup (the worst shape against the strongest baseline);
    on a CPU its interpreter time, and whether it is the lowest (`fastest`: the attempt with the lowest
    interpreter time, and that time)."""
    if verdict is not None and not verdict.timing_meaningful:
        lat = _geomean([r.latency_us for r in verdict.shapes])
        line = f"attempt {attempt}" + (f", {duration_us(lat)} in the CPU's interpreter" if lat else "")
        if fastest is None or fastest[0] == attempt:
            return line + ", the correct kernel with the lowest interpreter time"
        return (line + f", chosen by its speedup, noise on a CPU (attempt {fastest[0]} had the lowest interpreter "
                       f"time, {duration_us(fastest[1])})")
    if speedup_ is None:
        return f"attempt {attempt} (no baseline timed)"
    if verdict is not None and verdict.metric is not None:
        return f"attempt {attempt} at {speedup(speedup_)} better than the task's own files ({verdict.metric.name})"
    return f"attempt {attempt} at {speedup(speedup_)} (its worst shape, against the strongest baseline)"


def progress_line(st, best_verdict: Verdict | None, failing: str = "") -> str:
    """The live status line `run` and `follow` print now and then (RunStatus `st`)."""
    if st.best_attempt is None:
        best = "best: none yet"
    elif best_verdict is not None and not best_verdict.timing_meaningful:
        lat = _geomean([r.latency_us for r in best_verdict.shapes])
        best = f"best: attempt {st.best_attempt}" + (f", {duration_us(lat)} in the CPU's interpreter" if lat else "")
    elif st.best_speedup is not None:
        best = f"best: {speedup(st.best_speedup)} (attempt {st.best_attempt})"
    else:
        best = f"best: attempt {st.best_attempt}"
    return (f"[{st.tool_calls}/{st.tool_calls_budget} tool calls, {st.hours_used:.2f}/{st.hours_budget:g} h, "
            f"{best}] {st.step}{failing}")


def run_report_table(rep) -> str:
    cpu = rep.best is not None and not rep.best.verdict.timing_meaningful
    lines = [f"{rep.problem} ({rep.policy}), workflow {rep.workflow_id}: {rep.stop_reason}",
             f"  {rep.tool_calls} tool calls, {rep.turns} turns, {rep.attempts} attempts, "
             f"{rep.continue_as_new} continue-as-new, {rep.compactions} compactions, {rep.hours:.2f} h"]
    ok = [((a.best_eval() or a.evals[-1]).latency_us, a.n) for a in rep.ledger if a.best_eval()]
    fastest = min(((lat, n) for lat, n in ok if lat is not None), default=None)
    if rep.tokens.calls:
        lines.append(f"  model: {rep.tokens.calls} calls, {rep.tokens.prompt_tokens} prompt + "
                     f"{rep.tokens.completion_tokens} completion tokens")
    if rep.best is None:
        lines.append("  best: no kernel with an ok verdict")
    else:
        b = rep.best
        lines += [f"  best: {best_line(b.attempt, b.speedup, b.verdict, fastest and (fastest[1], fastest[0]))} "
                  f"(sha256 {b.sha256[:12]})", "",
                  verdict_table(b.verdict)]
        if rep.best_sweep is not None:
            sw = rep.best_sweep
            lines.append("  sweep shapes (correctness): " + ("correct on every shape" if sw.status == "ok"
                                                             else f"{sw.status}: {sw.reason}"))
    if rep.agents:
        lines += ["", "  agents:"]
        for a in rep.agents:
            sp = f"{speedup(a.best_speedup)} (attempt {a.best_attempt})" if a.best_speedup is not None else "no best"
            lines.append(f"  {a.agent:>5} {a.tool_calls:>4} tool calls  {sp:<24} {a.status}  [{a.workflow_id}]")
    tried = [a for a in rep.ledger if a.evals]
    if tried:
        # a task's attempts have a metric, not shapes and latencies: its ratio is all there is to show
        task = all(e.latency_us is None and e.baseline in (None, TASK_BASELINE) for a in tried for e in a.evals)
        legend = ("times better than the task's own files on its metric" if task else
                  f"latency is the geometric mean over the shapes{' (the CPU interpreter: noise)' if cpu else ''}; "
                  "speedup the worst shape's against the strongest baseline")
        lines += ["", f"  attempts{' (the last 30)' if len(tried) > 30 else ''}: {legend}",
                  f"  {'#':>5} {'origin':<6} {'status':<13} {'' if task else 'latency':>10} "
                  f"{'better' if task else 'speedup':<24} configuration"]
        for a in tried[-30:]:
            e = a.best_eval() or a.evals[-1]
            sp = f"{speedup(e.speedup)} vs {e.baseline}" if e.speedup is not None else ""
            cfg = config_label(a.config)
            mark = "*" if rep.best is not None and a.n == rep.best.attempt else " "
            lines.append(f" {mark}{a.n:>5} {a.origin:<6} {e.status:<13} {duration_us(e.latency_us):>10} {sp:<24} {cfg}")
        if rep.best is not None:
            lines.append("  (* the best)")
    return "\n".join(lines)


def suite_report_table(report, stopped: dict[str, str] | None = None) -> str:
    """The suite's problems, one row each, its columns as wide as their longest entry, and why each
    problem's run stopped (`stopped`: workflow id -> the run's stop reason)."""
    stopped = stopped or {}
    rows = []
    for e in report.problems:
        sp = ", ".join(f"{speedup(v)} vs {k}" for k, v in e.speedups.items()) or "-"
        why = stopped.get(e.workflow_id) or e.stop_reason or e.reason
        rows.append((e.problem, e.status, "-" if e.best_attempt is None else str(e.best_attempt), sp,
                     " ".join(why.split())[:200]))
    head = ("problem", "status", "best", "speedups (geometric mean over the shapes)", "stopped because")
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i]) for i in range(4)]

    def line(cells) -> str:
        return (f"  {cells[0]:<{widths[0]}}  {cells[1]:<{widths[1]}}  {cells[2]:>{widths[2]}}  "
                f"{cells[3]:<{widths[3]}}  {cells[4]}").rstrip()

    lines = [f"suite {report.workflow_id}: {len(report.problems)} problems", line(head)] + [line(r) for r in rows]
    if any(not e.timing_meaningful for e in report.problems):
        lines.insert(1, f"  {CPU_LINE}")
    fast = ", ".join(f"{k} {v:.2f}" for k, v in report.fast_p.items())
    gm = report.geomean_speedup_vs_eager
    lines.append(f"  {fast}; geometric-mean speedup vs eager {speedup(gm) if gm is not None else '-'}")
    return "\n".join(lines)
