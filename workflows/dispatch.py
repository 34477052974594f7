"""The kernel tools: each tool call (the model's, or the tuner's) is one activity, numbered, recorded in
the ledger, and answered with what the model reads. Writes and edits make attempts; evaluations file
their digests under the attempt judged and may crown a new best (only an ok profile can). Runs inside
the workflow."""
from __future__ import annotations

import bisect
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from compaction.memory import AttemptDigest
    from reports.fmt import duration_us
    from workflows import names
    from workflows.models import (AgentNews, Attempt, EditInput, EvalInput, EvalResult, ListInput, NoteInput, RunBest,
                                  ShowInput, SourceRef, ToolCallRecord, ToolResult, WriteInput)
    from workflows.toolspec import canonical, parse_call
    from workflows.yardstick import beats

from workflows.islands import Islands
from workflows.run import Run, short

NOTES_KEPT = 200
PROBLEM_LINE_CHARS = 1000  # a broken problem's line, whole (its message is capped at 300 where it is made)
Answer = tuple[str, bool, "int | None"]  # what the model reads, whether the tool did it, the attempt it concerned


class ToolDispatch:
    def __init__(self, run: Run, islands: Islands) -> None:
        self.run, self.islands = run, islands

    async def call(self, name: str, arguments: Any, *, call_id: str, thought: str = "", origin: str = "",
                   target: tuple[int, SourceRef] | None = None) -> str:
        """Run one tool call as one activity; record it in the ledger; return what the model reads.
        `target` (an attempt and its source) lets an evaluation run beside others on an attempt other
        than the current one; its number is taken when it starts, so calls in flight together differ."""
        run, st = self.run, self.run.state
        st.tool_calls += 1
        seq = st.tool_calls
        name = canonical(name)
        args, error = parse_call(name, arguments)
        attempt: int | None = target[0] if target else st.current
        if error is not None:
            text, ok = error, False
        else:
            run.step = f"tool call {seq}: {name}"
            run.details()
            try:
                text, ok, attempt = await self._dispatch(name, args, seq, thought, origin, target)
                await run.recovered(name)
                await self.islands.tell_run()
            except ActivityError as err:
                run.fault_over(name)
                cause = err.cause or err
                ok = False
                if isinstance(cause, ApplicationError) and cause.type == names.PROBLEM_BROKEN:
                    # the problem file's own code fails: no kernel can be judged; the run ends at once, its
                    # one line (with the file's line) whole in the notebook and the stop reason
                    line = short(cause.message, PROBLEM_LINE_CHARS)
                    text = f"the problem itself is broken, so the run ends: {line}"
                    st.stop_requested = st.stop_requested or f"the problem is broken: {line}"
                    await run.notebook(f"tool call {seq} ({name}): the problem is broken: {line}")
                else:
                    text = (f"infrastructure error: {name} failed after its retries ({short(str(cause), 400)}). "
                            f"Nothing was learned about the kernel; you may try again.")
                    if isinstance(cause, ApplicationError) and cause.type == names.TASK_BROKEN:  # the task's own files fail
                        st.stop_requested = st.stop_requested or f"the task is broken: {short(str(cause), 300)}"
                    if workflow.patched(names.PATCH_FAULT_REPORTS):
                        await run.notebook(f"tool call {seq} ({name}) failed: {short(str(cause), 300)}")
        st.calls_since_compaction += 1
        # in seq order, also when calls in flight together finish out of order
        bisect.insort(st.ledger, ToolCallRecord(seq=seq, tool=name, call_id=call_id, attempt=attempt, ok=ok,
                                                summary=short(text.splitlines()[0] if text else "")),
                      key=lambda r: r.seq)
        run.upsert_search_attributes()
        return text

    async def _dispatch(self, name: str, args: Any, seq: int, thought: str, origin: str,
                        target: tuple[int, SourceRef] | None) -> Answer:
        if name in (names.WRITE_KERNEL, names.EDIT_KERNEL):
            return await self._new_attempt(name, args, seq, thought, origin)
        if name in names.EVAL_TOOLS:
            return await self._evaluate(name, seq, thought, target)
        if name == names.SHOW_KERNEL:
            return await self._show(args.attempt, seq)
        if name == names.LIST_ATTEMPTS:
            return await self._list(args.limit, seq)
        if name == names.NOTE:
            return await self._note(args.text, seq)
        raise ApplicationError(f"no dispatch for tool {name}")  # parse_call knows every tool

    async def _new_attempt(self, name: str, args: Any, seq: int, thought: str, origin: str) -> Answer:
        run, st, spec = self.run, self.run.state, self.run.spec
        setup, cap, n = st.setup, spec.tool_output_cap, len(st.attempts)
        if name == names.WRITE_KERNEL:
            res: ToolResult = await workflow.execute_activity(
                names.WRITE_KERNEL, WriteInput(source=args.source, attempt=n, entry_point=setup.entry_point,
                                               inline_cap=spec.inline_source_cap, max_bytes=spec.max_source_bytes,
                                               output_cap=cap),
                result_type=ToolResult, **run.opts(
                    f"write attempt {n}" + (f": {thought}" if origin == "tuner" else f" (tool call {seq})")))
        else:
            if st.current_source is None:
                return "refused: there is no current candidate to edit; write_kernel first", False, None
            res = await workflow.execute_activity(
                names.EDIT_KERNEL, EditInput(current=st.current_source, old=args.old, new=args.new, attempt=n,
                                             entry_point=setup.entry_point, inline_cap=spec.inline_source_cap,
                                             max_bytes=spec.max_source_bytes, output_cap=cap),
                result_type=ToolResult, **run.opts(f"edit attempt {st.current} into {n} (tool call {seq})"))
        if not res.ok or res.source is None:
            return res.text, False, st.current
        st.attempts.append(Attempt(n=n, origin=origin or ("write" if name == names.WRITE_KERNEL else "edit"),
                                   parent=0 if origin == "tuner" else st.current, sha256=res.source.sha256,
                                   lines=res.source.lines, config=res.config, tool_call=seq))
        st.current, st.current_source = n, res.source
        return res.text, True, n

    async def _evaluate(self, name: str, seq: int, thought: str, target: tuple[int, SourceRef] | None) -> Answer:
        run, st, spec = self.run, self.run.state, self.run.spec
        setup = st.setup
        n, source = target if target else (st.current, st.current_source)
        verb = name.removesuffix("_kernel")
        best = f"; best {st.best.speedup:.3g}x @ {st.best.attempt}" if st.best and st.best.speedup else ""
        settings = spec.eval if st.policy == "llm" else spec.eval.model_copy(update={"ncu": False})
        res: EvalResult = await workflow.execute_activity(  # (the tuner reads no Nsight metrics)
            name, EvalInput(tool=name, problem=setup.problem, problem_source=spec.problem_source, attempt=n,
                            task_key=setup.task_key, source=source, settings=settings, output_cap=spec.tool_output_cap),
            result_type=EvalResult, **run.opts(f"{verb} attempt {n}{run.context(n)}{best}", gpu=True))
        d = res.digest.model_copy(update={"tool_call": seq})
        bisect.insort(st.attempts[n].evals, d, key=lambda e: e.tool_call)
        if setup.shape_set is None and not setup.shapes:
            setup.shapes = [r.shape for r in res.verdict.shapes]
        new_best = self._consider_best(n, res, source)
        st.window.append(AttemptDigest(attempt=n, tool=name, status=d.status, summary=short(d.reason, 200),
                                       latency_us=d.latency_us, speedup=d.speedups,
                                       config=st.attempts[n].config, note=thought or None))
        line = f"{verb} attempt {n}: {d.status}"
        if d.latency_us is not None and not res.verdict.timing_meaningful:  # a speedup there is noise
            line += f", {duration_us(d.latency_us)} in the CPU's interpreter"
        elif d.speedup is not None:
            line += f", {d.speedup:.3g}x vs {d.baseline}"
        elif d.latency_us is not None:
            line += f", {d.latency_us:.4g} us"
        if d.status != "ok":
            line += f" ({short(d.reason, 100)})"
            if spec.agent is not None:
                self.islands.share(AgentNews(agent=spec.agent.index, kind="failure", line=(
                    f"{verb} of a {st.attempts[n].origin} attempt{run.context(n)}: {d.status}: {short(d.reason, 200)}")))
        if new_best:
            line += " (new best)"
        await run.notebook(line + run.context(n))
        return res.text, d.status == "ok", n

    def _consider_best(self, n: int, res: EvalResult, source: SourceRef) -> bool:
        """Only ok verdicts of a profile count, ranked by the yardstick (workflows/yardstick.py)."""
        run, st, spec = self.run, self.run.state, self.run.spec
        v, d = res.verdict, res.digest
        if d.status != "ok" or d.mode != "full":
            return False
        if st.best is not None and not beats(run.ranked(d.speedup, v.timing_meaningful), d.latency_us,
                                             run.best_ranked(), run.best_latency()):
            return False
        st.best = RunBest(attempt=n, source=source, verdict=v, speedup=d.speedup, tool_call=st.tool_calls + 1)
        run.upsert_search_attributes(force=True)
        if spec.agent is not None:
            sp = f" at {d.speedup:.3g}x" if d.speedup is not None else ""
            self.islands.share(AgentNews(agent=spec.agent.index, kind="best", line=f"new best{sp} (its attempt {n})",
                                         source=source, verdict=v, speedup=d.speedup, config=st.attempts[n].config))
        return True

    async def _show(self, which: int | None, seq: int) -> Answer:
        run, st, spec = self.run, self.run.state, self.run.spec
        if which is None:
            n, ref, label = st.current, st.current_source, f"attempt {st.current} (the current candidate)"
        elif which == -1:
            if st.best is None:
                return "there is no best kernel yet (no profiled ok kernel)", False, None
            n, ref, label = st.best.attempt, st.best.source, f"attempt {st.best.attempt} (the best)"
        else:
            a = st.attempt(which)
            if a is None:
                return f"there is no attempt {which}; attempts run from 0 to {len(st.attempts) - 1}", False, None
            n, label = a.n, f"attempt {a.n}"
            ref = (st.current_source if a.n == st.current else st.best.source if st.best and st.best.attempt == a.n
                   else SourceRef(sha256=a.sha256, lines=a.lines))
        res = await workflow.execute_activity(
            names.SHOW_KERNEL, ShowInput(label=label, source=ref, output_cap=max(spec.tool_output_cap,
                                                                                spec.inline_source_cap)),
            result_type=ToolResult, **run.opts(f"show {label} (tool call {seq})"))
        return res.text, res.ok, n

    async def _list(self, limit: int, seq: int) -> Answer:
        run, st = self.run, self.run.state
        limit = max(1, min(limit, 200))
        res = await workflow.execute_activity(
            names.LIST_ATTEMPTS, ListInput(attempts=st.attempts[-limit:], total=len(st.attempts),
                                           best=st.best.attempt if st.best else None, current=st.current,
                                           output_cap=run.spec.tool_output_cap),
            result_type=ToolResult, **run.opts(f"list the last {limit} attempts (tool call {seq})"))
        return res.text, res.ok, None

    async def _note(self, text: str, seq: int) -> Answer:
        run, st = self.run, self.run.state
        res = await workflow.execute_activity(
            names.NOTE, NoteInput(workflow_id=workflow.info().workflow_id, seq=seq, text=text,
                                  output_cap=run.spec.tool_output_cap),
            result_type=ToolResult, **run.opts(f"note: {short(text, 80)}"))
        if res.ok:
            st.notes = (st.notes + [short(text, 1000)])[-NOTES_KEPT:]
        return res.text, res.ok, None
