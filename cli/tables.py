"""The tables `marathon` prints: a verdict (`eval`), a run's report (`run`, `follow`) and a suite's."""
from __future__ import annotations

from kernels.evaluator.verdict import Verdict


def verdict_table(v: Verdict) -> str:
    lines = [f"{v.problem} / {v.kernel} on {v.device}" + (f" ({v.gpu.name}, driver {v.gpu.driver})" if v.gpu else "")
             + f": {v.status.upper()}", f"  {v.reason}"]
    if v.shapes:
        header = (f"  {'shape':<34} {'ok':<3} {'rel_err':>9} {'us':>10} {'graph us':>10} {'wall us':>10} "
                  f"{'roofline':>8}  speedups")
        lines += ["", header]
        for r in v.shapes:
            shape = ",".join(f"{k}={x}" for k, x in r.shape.items())
            graph = r.timing.graph_median_us if r.timing and r.timing.graph_median_us else None
            wall = r.timing.sync_wall_us if r.timing and r.timing.sync_wall_us else None
            sp = "  ".join(f"{k} {x:.2f}x ({r.baselines[k]:.1f} us)" for k, x in r.speedup.items())
            lines.append(f"  {shape:<34} {'yes' if r.correct else 'no':<3} "
                         f"{(f'{r.rel_err:.2e}' if r.rel_err is not None else '-'):>9} "
                         f"{(f'{r.latency_us:.2f}' if r.latency_us is not None else '-'):>10} "
                         f"{(f'{graph:.2f}' if graph else '-'):>10} "
                         f"{(f'{wall:.1f}' if wall else '-'):>10} "
                         f"{(f'{r.roofline_pct:.1f}%' if r.roofline_pct is not None else '-'):>8}  {sp}")
    if not v.timing_meaningful and any(r.latency_us for r in v.shapes):
        lines.append("  (CPU / Triton interpreter: times are not meaningful)")
    elif any(r.timing and r.timing.sync_wall_us for r in v.shapes):
        lines.append("  (us: device time per call, L2 flushed; graph: as a CUDA graph; wall: one call between two "
                     "device synchronisations, host launch cost included)")
    lines += [f"  flag: {f}" for f in v.flags]
    spent = ", ".join(f"{k} {t:.1f}" for k, t in sorted(v.phases_s.items(), key=lambda kv: -kv[1]) if t >= 0.05)
    lines.append(f"  torch {v.versions.get('torch')}, triton {v.versions.get('triton')}, {v.elapsed_s:.1f} s"
                 + (f" ({spent})" if spent else ""))
    if v.status != "ok" and v.log_tail.strip():
        lines += ["", "  candidate output (tail):"] + ["    " + x for x in v.log_tail.strip().splitlines()[-20:]]
    return "\n".join(lines)


def run_report_table(rep) -> str:
    lines = [f"{rep.problem} ({rep.policy}), workflow {rep.workflow_id}: {rep.stop_reason}",
             f"  {rep.tool_calls} tool calls, {rep.turns} turns, {rep.attempts} attempts, "
             f"{rep.continue_as_new} continue-as-new, {rep.compactions} compactions, {rep.hours:.2f} h"]
    if rep.tokens.calls:
        lines.append(f"  model: {rep.tokens.calls} calls, {rep.tokens.prompt_tokens} prompt + "
                     f"{rep.tokens.completion_tokens} completion tokens")
    if rep.best is None:
        lines.append("  best: no kernel with an ok verdict")
    else:
        b = rep.best
        sp = f"{b.speedup:.3f}x against the strongest baseline" if b.speedup is not None else "no baseline timed"
        lines += [f"  best: attempt {b.attempt}, {sp} (sha256 {b.sha256[:12]})", "", verdict_table(b.verdict)]
        if rep.best_sweep is not None:
            sw = rep.best_sweep
            lines.append("  sweep shapes (correctness): " + ("correct on every shape" if sw.status == "ok"
                                                             else f"{sw.status}: {sw.reason}"))
    if rep.agents:
        lines += ["", "  agents:"]
        for a in rep.agents:
            sp = f"{a.best_speedup:.3f}x (attempt {a.best_attempt})" if a.best_speedup is not None else "no best"
            lines.append(f"  {a.agent:>5} {a.tool_calls:>4} tool calls  {sp:<24} {a.status}  [{a.workflow_id}]")
    tried = [a for a in rep.ledger if a.evals]
    if tried:
        lines += ["", "  attempts:"]
        for a in tried[-30:]:
            e = a.best_eval() or a.evals[-1]
            sp = f"{e.speedup:.3f}x vs {e.baseline}" if e.speedup is not None else ""
            lat = f"{e.latency_us:.1f} us" if e.latency_us is not None else ""
            cfg = ", ".join(f"{k}={v}" for k, v in (a.config or {}).items())
            lines.append(f"  {a.n:>5} {a.origin:<6} {e.status:<13} {lat:>12} {sp:<24} {cfg}")
    return "\n".join(lines)


def suite_report_table(report) -> str:
    lines = [f"suite {report.workflow_id}: {len(report.problems)} problems",
             f"  {'problem':<24} {'status':<12} {'attempt':>7}  speedups (geometric mean over the shapes)"]
    for e in report.problems:
        sp = ", ".join(f"{v:.3g}x vs {k}" for k, v in e.speedups.items()) or e.reason[:80]
        lines.append(f"  {e.problem:<24} {e.status:<12} {e.best_attempt if e.best_attempt is not None else '-':>7}  {sp}")
    fast = ", ".join(f"{k} {v:.2f}" for k, v in report.fast_p.items())
    gm = report.geomean_speedup_vs_eager
    lines.append(f"  {fast}; geometric-mean speedup vs eager {f'{gm:.3g}x' if gm is not None else '-'}")
    return "\n".join(lines)
