"""The report's plots, with matplotlib (Agg: no display), each returned as a base64 PNG for an inline <img>."""
from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FormatStrFormatter, FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402

from kernels.labels import shape_label  # noqa: E402
from reports import fmt  # noqa: E402
from reports.collect import EvalPoint, RunFacts  # noqa: E402
from workflows.yardstick import beats  # noqa: E402

STATUS_COLOURS = {"ok": "#2e7d32", "incorrect": "#ef6c00", "compile_error": "#c62828", "timeout": "#6a1b9a",
                  "rejected": "#757575", "crashed": "#212121"}
OTHER_COLOUR = "#1565c0"


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def metric(facts: RunFacts) -> str:
    """What the progress plots show: the speedup where the run timed baselines, else the latency; on a CPU
    the latency, as the run ranks there (its speedups are noise)."""
    if facts.cpu:
        return "latency_us"
    return "speedup" if any(e.speedup is not None for e in facts.evaluations if e.status == "ok") else "latency_us"


def best_so_far(points: list[EvalPoint], key: str, what: str) -> list[tuple[float, float]]:
    """(x, best value so far) at each ok profile that improved on the best by the run's yardstick (higher
    speedup, or lower latency). The step curve of the run's progress; x is `key` (hours or tool_call)."""
    out: list[tuple[float, float]] = []
    best = None
    for e in sorted((p for p in points if getattr(p, key) is not None), key=lambda p: (getattr(p, key), p.tool_call)):
        value = getattr(e, what)
        if e.status != "ok" or e.mode != "full" or value is None:
            continue
        better = (beats(value, None, best, None) if what == "speedup" else beats(None, value, None, best))
        if better:
            best = value
            out.append((float(getattr(e, key)), value))
    return out


def progress_png(facts: RunFacts) -> str | None:
    """Best speedup (or latency) over elapsed hours and over tool calls, every evaluation a point coloured by
    its verdict. None where no evaluation was ok: there is no curve to draw."""
    what = metric(facts)
    if not any(e.status == "ok" and getattr(e, what) is not None for e in facts.evaluations):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    ok_values = [getattr(e, what) for e in facts.evaluations if e.status == "ok" and getattr(e, what) is not None]
    floor = min(ok_values) * (0.9 if what == "speedup" else 1.0)
    fail_y = 0.0 if what == "speedup" else max(ok_values) * 1.08  # failed evaluations: a row of their own
    last_hours = max((e.hours for e in facts.evaluations if e.hours is not None), default=0.0)
    end = {"hours": max(facts.hours, last_hours), "tool_call": float(facts.tool_calls)}
    for ax, key, label in ((axes[0], "hours", "elapsed hours"), (axes[1], "tool_call", "tool calls")):
        steps = best_so_far(facts.evaluations, key, what)
        if steps:
            xs = [x for x, _ in steps] + [max(end[key], steps[-1][0])]
            ys = [y for _, y in steps] + [steps[-1][1]]
            ax.step(xs, ys, where="post", color="#0d47a1", linewidth=2, label="best so far", zorder=3)
        for status in sorted({e.status for e in facts.evaluations}):
            pts = [e for e in facts.evaluations if e.status == status and getattr(e, key) is not None]
            xs = [getattr(e, key) for e in pts]
            ys = [getattr(e, what) if e.status == "ok" and getattr(e, what) is not None else fail_y for e in pts]
            ax.scatter(xs, ys, s=28, color=STATUS_COLOURS.get(status, OTHER_COLOUR), label=status, zorder=4,
                       marker="o" if status == "ok" else "x")
        ax.set_xlabel(label)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=key == "tool_call"))
        if key == "hours":
            ax.xaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"{facts.task.spec.metric.read}: times better than the task's own files" if facts.task
                       else "speedup, worst shape vs strongest baseline" if what == "speedup"
                       else "latency, geometric mean over shapes (lower is better)")
    axes[0].yaxis.set_major_formatter(FuncFormatter(
        lambda y, _: fmt.speedup(y) if what == "speedup" else fmt.duration_us(y)))
    if what == "speedup":  # room below the zero line, where the failed evaluations sit
        axes[0].set_ylim(bottom=min(0.0, floor) - 0.04 * max(ok_values))
    axes[1].legend(loc="best", fontsize=8)
    failures = any(e.status != "ok" for e in facts.evaluations)
    fig.suptitle("best " + ("gain over the task's own files" if facts.task else "speedup" if what == "speedup"
                            else "latency") + " so far; every evaluation a point"
                 + (" (failures on the " + ("zero line" if what == "speedup" else "top line") + ")" if failures else "")
                 + ("\nCPU interpreter times: noise, not a speed" if facts.cpu else ""),
                 fontsize=10, color="#bf360c" if facts.cpu else "black")
    return _png(fig)


def shape_series(facts: RunFacts) -> list[tuple[str, str, object]]:
    """The bars of the per-shape plot: (label, colour, value of a shape's result). The roofline floor only
    where the verdict has one (a GPU's): a legend entry without bars says nothing."""
    v = facts.best_verdict
    rows = [r for r in v.shapes if r.latency_us] if v else []
    names = sorted({b for r in rows for b in r.baselines})
    series = [("best kernel", "#0d47a1", lambda r: r.latency_us)]
    series += [(b, c, (lambda r, b=b: r.baselines.get(b)))
               for b, c in zip(names, ["#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#558b2f"])]
    if any(r.floor_us for r in rows):
        series.append(("roofline floor", "#9e9e9e", lambda r: r.floor_us))
    return series


def shapes_png(facts: RunFacts) -> str | None:
    """Per shape of the best's verdict: its latency beside each baseline's and the roofline floor."""
    v = facts.best_verdict
    if v is None or not any(r.latency_us for r in v.shapes):
        return None
    rows = [r for r in v.shapes if r.latency_us]
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.9 * len(rows)))
    series = shape_series(facts)
    height = 0.8 / len(series)
    for i, (label, colour, get) in enumerate(series):
        ys = [j + i * height for j in range(len(rows))]
        vals = [get(r) or 0.0 for r in rows]
        ax.barh(ys, vals, height=height, color=colour, label=label)
    ax.set_yticks([j + 0.4 - height / 2 for j in range(len(rows))])
    ax.set_yticklabels([shape_label(r.shape) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt.duration_us(x)))  # µs and ms, not 10^3
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("latency, median of the timed calls (log scale)"
                  + ("" if v.timing_meaningful else "; CPU interpreter times: noise, not a speed"),
                  color="black" if v.timing_meaningful else "#bf360c")
    ax.legend(loc="best", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)
