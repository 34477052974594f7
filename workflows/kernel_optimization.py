"""KernelOptimization: the day-long optimization run as a deterministic Temporal workflow.

    prepare ─▶ profile the starting kernel ─▶ loop until a budget is spent or a stop arrives:
        llm:   [compact?] ─▶ agent_turn (the model) ─▶ each tool call it makes, one activity each
        tuner: the next untried configuration ─▶ write_kernel ─▶ profile_kernel
        continue-as-new when Temporal suggests it, every `continue_as_new_every` turns, or when the
        segment's history passes `max_history_bytes`, after every update handler has finished
    ─▶ RunReport

Imports: pydantic models, activity names and pure helpers only (never torch, triton or openai). Every
tool call the model makes is one activity; its result is recorded in RunState, which is carried
across continue-as-new, so the event history is the run's log and crash recovery is Temporal's replay.
"""
from __future__ import annotations

import asyncio
import bisect
import json
import math
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel, ValidationError

    from activities.compaction import CompactInput, CompactResult
    from compaction.memory import AttemptDigest, Goal, LiveFigures, empty_memory
    from compaction.memory import BestKernel as MemoryBest
    from compaction.prompt import (PromptBudgetError, build_messages, estimate_prompt, needs_compaction, tail_turns, tools_tokens,
                                   with_best)
    from compaction.summarize import clip_transcript
    from compaction.text import one_line
    from kernels.problems.tunables import TunablesError, with_config
    from reports.fmt import duration_us
    from workflows import names
    from workflows.models import (AgentLine, AgentNews, AgentRole, AgentTurnInput, AgentTurnResult, Attempt,
                                  BestKernel, BestReport, EvalDigest,
                                  EditInput, EvalInput, EvalResult, Extension, Fault, ListInput, NotebookEntry,
                                  describe_invalid,
                                  NoteInput, PrepareInput, RunReport, RunSetup, RunSpec, RunState, RunStatus,
                                  ShowInput, SourceRef, ToolCallRecord, ToolResult, TunerTrial, WriteInput)
    from workflows.toolspec import TOOLS, parse_call
    from workflows.tuner import config_key, next_config, space_size

KEEP_TURNS = 4  # turns kept verbatim after a compaction,
KEEP_FRACTION = 0.3  # at most this share of the context budget (so compaction does not thrash)
LEDGER_SUMMARY_CHARS = 160
NOTEBOOK_LINES = 40
NOTES_KEPT = 200
SEARCH_ATTRIBUTE_EVERY = 10  # tool calls between search-attribute upserts (a new best upserts at once)


def _short(text: str, n: int = LEDGER_SUMMARY_CHARS) -> str:
    return one_line(text, n)


def _fmt_cfg(config: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (config or {}).items())


def _shapes_text(setup: RunSetup) -> str:
    shapes = "; ".join(",".join(f"{k}={v}" for k, v in s.items()) for s in setup.shapes)
    if setup.shape_set:
        return f"{setup.shape_set}: {shapes}"
    return shapes or "smoke on a CPU worker, bench on a CUDA worker"


def _parse_spec(raw: Any) -> RunSpec:
    """The input, validated here rather than by the data converter: a converter's error fails only the
    workflow task, which Temporal retries for ever; this error fails the run at once, saying why."""
    try:
        return RunSpec.model_validate(raw)
    except ValidationError as err:
        raise ApplicationError(f"bad run input: {describe_invalid(err)}", type="BadRunSpec",
                               non_retryable=True) from None


def _parse_update(model: type[BaseModel], raw: Any, name: str) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ValueError(f"bad {name} payload: {describe_invalid(err)}") from None


def _text_arg(raw: Any, name: str, limit: int) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"bad {name} payload: a string is needed (got {type(raw).__name__})")
    if len(raw) > limit:
        raise ValueError(f"bad {name} payload: {len(raw)} characters, at most {limit}")
    return raw


def _geomean_latency(verdict: Any) -> float | None:
    lat = [r.latency_us for r in verdict.shapes if r.latency_us] if verdict is not None else []
    return round(math.exp(sum(math.log(x) for x in lat) / len(lat)), 3) if lat else None


def _beats(speedup: float | None, latency: float | None, cur_speedup: float | None, cur_latency: float | None) -> bool:
    """The workflow's yardstick for a best kernel: higher speedup wins, or lower latency without baselines."""
    if speedup is not None and cur_speedup is not None:
        return speedup > cur_speedup
    if cur_speedup is None and cur_latency is None:
        return speedup is not None or latency is not None
    return cur_latency is not None and latency is not None and latency < cur_latency


MAX_HINT_CHARS = 8000  # a hint lives in the history and in every later prompt
MAX_STOP_REASON_CHARS = 500


@workflow.defn(name=names.WORKFLOW_TYPE)
class KernelOptimization:
    # The input and the update payloads arrive as plain JSON (`Any`) and are validated by the workflow
    # itself: see _parse_spec. A RunSpec passed by a client serializes to the same JSON.
    @workflow.init
    def __init__(self, spec: Any = None) -> None:
        spec = _parse_spec(spec)
        self.spec = spec.model_copy(update={"carry": None})
        self.state = spec.carry or RunState(policy=spec.resolved_policy(), budget_hours=spec.budgets.hours,
                                       budget_tool_calls=spec.budgets.max_tool_calls,
                                       target_speedup=spec.budgets.target_speedup, hints=list(spec.hints),
                                       pending_hints=list(spec.hints))
        self.step = "starting"
        self.fault: Fault | None = None  # an activity failing now, retried by Temporal (FAULT_SIGNAL)
        self.turns_this_segment = 0
        self._search_attributes_at = -1
        self._outbox: list[AgentNews] = []  # an agent's news for the run, sent after the tool call that made it
        self._children: dict[int, Any] = {}  # islands, in the run: agent -> its child workflow handle
        self._agents_done: set[int] = set()
        self._timing_meaningful: dict[int, bool] = {}  # attempt -> its last verdict's (the tuner's trials read it)

    # ------------------------------------------------------------------------------------ run
    @workflow.run
    async def run(self, spec: Any = None) -> RunReport:
        st = self.state
        if st.setup is None:
            await self._start()
        self._upsert_search_attributes(force=True)
        if self.spec.agents > 1 and not st.stop_reason and not st.agents:
            await self._islands()
        while True:
            await self._wait_if_paused()
            reason = self._finished()
            if reason:
                st.stop_reason = reason
                break
            if self._continue_as_new_due():
                await self._continue_as_new()
            if st.policy == "llm":
                await self._llm_turn()
            else:
                await self._tuner_step()
            st.turns += 1
            self.turns_this_segment += 1
        if st.policy == "tuner" and st.window and not st.agents:
            await self._compact()  # the tuner's memory: what it tried, what won
        if workflow.patched(names.PATCH_SWEEP_BEST):
            await self._sweep_best()
        self.step = "finished"
        await self._notebook(f"finished: {st.stop_reason}; {self._best_line()}; {st.tool_calls} tool calls, "
                             f"{len(st.attempts)} attempts, {st.segment} continue-as-new, {st.compactions} compactions")
        self._upsert_search_attributes(force=True)
        self._details()
        return self._report()

    async def _sweep_best(self) -> None:
        """Test the kernel handed back for correctness on the problem's sweep shapes, once, on a GPU
        worker. The run's evaluations saw their own shapes and one random probe each, and a kernel can
        be fast there and wrong elsewhere: the shipped KDA kernel was once wrong at every one-chunk
        length, and only the sweep showed it. Skipped where the best was judged on a CPU (sweep shapes are GPU-sized), where
        the run was already judged on the sweep, and when a stop was asked for."""
        st, spec = self.state, self.spec
        b = st.best
        if not spec.eval.sweep_best or b is None or st.setup is None:
            return
        if b.verdict.device != "cuda" or spec.eval.shapes == "sweep" or st.stop_requested:
            return
        self.step = f"testing the best (attempt {b.attempt}) on the sweep shapes"
        settings = spec.eval.model_copy(update={"shapes": "sweep", "shape_list": [], "baselines": False, "ncu": False})
        try:
            res: EvalResult = await workflow.execute_activity(
                names.TEST_KERNEL, EvalInput(tool=names.TEST_KERNEL, problem=st.setup.problem, attempt=b.attempt,
                                             problem_source=spec.problem_source,
                                             source=b.source, settings=settings, output_cap=spec.tool_output_cap),
                result_type=EvalResult, **self._opts(f"test the best, attempt {b.attempt}, on the sweep shapes",
                                                     gpu=True))
        except ActivityError as err:  # e.g. a problem without a sweep set: the notebook says so, the run ends
            await self._notebook(f"sweep check of the best (attempt {b.attempt}) did not run: "
                                 f"{_short(str(err.cause or err), 200)}")
            return
        st.best_sweep = res.digest
        verdict = "correct on every sweep shape" if res.digest.status == "ok" else (
            f"{res.digest.status}: {_short(res.digest.reason, 200)}")
        await self._notebook(f"sweep check of the best (attempt {b.attempt}): {verdict}")

    # ------------------------------------------------------------------------------ islands
    async def _islands(self) -> None:
        """Run `agents` agents as child workflows, each from this run's profiled start, with its own context
        and memory and an even share of the tool calls left; their news (a new best, a failure) comes
        here as a signal and goes on to the others. The children are durable as this run is: a dead worker
        replays them, and their results land in this run's history."""
        st, spec = self.state, self.spec
        n = spec.agents
        left = st.budget_tool_calls - st.tool_calls
        hours = max(st.budget_hours - self._hours_used(), 1e-6)
        wid = workflow.info().workflow_id
        self.step = f"running {n} agents"
        await self._notebook(f"islands: {n} agents as child workflows sharing {left} tool calls, the best kernel "
                             f"and the failures worth not repeating")

        async def agent(i: int) -> tuple[AgentLine, RunReport | None]:
            share = left // n + (1 if i <= left % n else 0)
            carry = RunState(setup=st.setup, policy=st.policy, started_at=workflow.now(), budget_hours=hours,
                             budget_tool_calls=share, target_speedup=st.target_speedup,
                             attempts=[a.model_copy(deep=True) for a in st.attempts], current=st.current,
                             current_source=st.current_source, best=st.best, memory=st.memory,
                             recent=list(st.recent) + ([{"role": "user", "content": (
                                 f"You are agent {i} of {n} working on this problem at once, each with its own "
                                 f"{share} tool calls: try a direction of your own. A faster kernel another agent "
                                 f"finds will be handed to you, and so will its failures.")}] if st.policy == "llm" else []),
                             hints=list(st.hints), tuner=st.tuner.model_copy(deep=True))
            child = spec.model_copy(update={
                "agents": 1, "agent": AgentRole(index=i, of=n), "carry": carry,
                "budgets": spec.budgets.model_copy(update={"hours": hours, "max_tool_calls": share}),
                "eval": spec.eval.model_copy(update={"sweep_best": False})})  # the run checks its best once
            cid = f"{wid}/agent-{i}"
            try:
                handle = await workflow.start_child_workflow(names.WORKFLOW_TYPE, child, id=cid, result_type=RunReport,
                                                             static_summary=f"agent {i} of {n} in {wid}")
                self._children[i] = handle
                rep: RunReport = await handle
            except ChildWorkflowError as err:
                self._agents_done.add(i)
                return AgentLine(agent=i, workflow_id=cid, status=f"failed: {_short(str(err.cause or err), 200)}"), None
            self._agents_done.add(i)
            line = AgentLine(agent=i, workflow_id=cid, status=rep.stop_reason, tool_calls=rep.tool_calls,
                             attempts=rep.attempts, best_speedup=rep.best.speedup if rep.best else None,
                             best_attempt=rep.best.attempt if rep.best else None,
                             shared_taken=sum(1 for a in rep.ledger if a.origin == "shared"))
            await self._notebook(f"agent {i}: {line.status}; {line.tool_calls} tool calls, best "
                                 + (f"{line.best_speedup:.3g}x" if line.best_speedup is not None else "none"))
            return line, rep

        async def forward_controls() -> None:
            """A stop, a hint, a pause or a resume given to the run reaches every agent; an extension is
            split among the agents still going as the budget was."""
            hints_sent, paused = len(st.hints), st.paused
            calls, hours_budget, target = st.budget_tool_calls, st.budget_hours, st.target_speedup
            while True:
                await workflow.wait_condition(lambda: len(self._agents_done) == n or bool(st.stop_requested)
                                              or len(st.hints) > hints_sent or st.paused != paused
                                              or (st.budget_tool_calls, st.budget_hours, st.target_speedup)
                                              != (calls, hours_budget, target))
                if len(self._agents_done) == n:
                    return
                for h in st.hints[hints_sent:]:
                    await self._tell_agents(AgentNews(kind="hint", line=h))
                hints_sent = len(st.hints)
                if st.paused != paused:
                    paused = st.paused
                    await self._tell_agents(AgentNews(kind="pause" if paused else "resume"))
                if (st.budget_tool_calls, st.budget_hours, st.target_speedup) != (calls, hours_budget, target):
                    going = [i for i in range(1, n + 1) if i not in self._agents_done]
                    more = st.budget_tool_calls - calls
                    for k, i in enumerate(going):
                        ext = Extension(hours=st.budget_hours - hours_budget, target_speedup=st.target_speedup,
                                        tool_calls=more // len(going) + (1 if k < more % len(going) else 0))
                        await self._tell_agents(AgentNews(kind="extend", extension=ext), only=i)
                    calls, hours_budget, target = st.budget_tool_calls, st.budget_hours, st.target_speedup
                if st.stop_requested:
                    await self._tell_agents(AgentNews(kind="stop", line=st.stop_requested))
                    return

        results = await asyncio.gather(forward_controls(), *(agent(i) for i in range(1, n + 1)))
        await workflow.wait_condition(workflow.all_handlers_finished)
        lines_reports: list[tuple[AgentLine, RunReport | None]] = list(results[1:])
        st.agents = [line for line, _ in lines_reports]
        st.tool_calls += sum(line.tool_calls for line in st.agents)
        st.turns += sum(r.turns for _, r in lines_reports if r is not None)
        winner = None
        for line, r in lines_reports:
            if r is not None and r.best is not None and _beats(
                    self._ranked(r.best.speedup, r.best.verdict.timing_meaningful), _geomean_latency(r.best.verdict),
                    self._ranked(st.best.speedup, st.best.verdict.timing_meaningful) if st.best else None,
                    self._best_latency() if st.best else None):
                st.best = BestKernel(attempt=r.best.attempt, source=SourceRef(sha256=r.best.sha256, text=r.best.source),
                                     verdict=r.best.verdict, speedup=r.best.speedup)
                winner = line.agent
        if winner is not None:
            await self._notebook(f"the best kernel is agent {winner}'s attempt {st.best.attempt}")
        st.stop_reason = f"{n} agents finished: " + "; ".join(f"agent {x.agent}: {_short(x.status, 80)}" for x in st.agents)

    async def _tell_agents(self, news: AgentNews, only: int | None = None) -> None:
        for i, handle in list(self._children.items()):
            if i == news.agent or i in self._agents_done or (only is not None and i != only):
                continue
            try:
                await handle.signal(names.AGENT_NEWS_SIGNAL, news)
            except Exception:  # the agent finished meanwhile: it needs no news
                pass

    async def _tell_run(self) -> None:
        """An agent's news to its run, after the tool call that made it."""
        parent = workflow.info().parent
        news, self._outbox = self._outbox, []
        if parent is None or self.spec.agent is None:
            return
        for item in news:
            try:
                await workflow.get_external_workflow_handle(parent.workflow_id).signal(names.AGENT_NEWS_SIGNAL, item)
            except Exception:  # the run is gone (terminated): the agent goes on alone
                pass

    @workflow.signal(name=names.AGENT_NEWS_SIGNAL)
    async def agent_news(self, raw: Any) -> None:
        try:
            news = AgentNews.model_validate(raw)
        except ValidationError:
            return
        st = self.state
        if self.spec.agent is None:  # the run: note it and pass it on
            if news.kind in ("best", "failure"):
                await self._notebook(f"agent {news.agent}: {_short(news.line, 200)}")
                await self._tell_agents(news)
            return
        if news.kind == "best":
            cur = st.shared_best
            if cur is None or _beats(news.speedup, _geomean_latency(news.verdict), cur.speedup,
                                     _geomean_latency(cur.verdict)):
                st.shared_best = news
        elif news.kind == "failure":
            st.shared_failures = (st.shared_failures + [_short(news.line, 300)])[-20:]
        elif news.kind == "stop":
            st.stop_requested = st.stop_requested or news.line or "the run was asked to stop"
        elif news.kind == "hint":
            st.hints.append(news.line)
            st.pending_hints.append(news.line)
        elif news.kind in ("pause", "resume"):
            self._set_paused(news.kind == "pause")
        elif news.kind == "extend" and news.extension is not None:
            self._extend(news.extension)

    async def _take_shared(self) -> None:
        """Between turns: take over another agent's best when it beats this agent's own (it becomes the
        current candidate and the best, so the next edit starts from it), and show the model the failures
        the others found."""
        st = self.state
        news, st.shared_best = st.shared_best, None
        if news is not None and news.source is not None and news.verdict is not None and _beats(
                self._ranked(news.speedup, news.verdict.timing_meaningful), _geomean_latency(news.verdict),
                self._ranked(st.best.speedup, st.best.verdict.timing_meaningful) if st.best else None,
                self._best_latency() if st.best else None):
            n = len(st.attempts)
            digest = EvalDigest(tool=names.PROFILE_KERNEL, mode="full", status=news.verdict.status,
                                reason=_short(news.verdict.reason, 300), speedup=news.speedup,
                                latency_us=_geomean_latency(news.verdict), tool_call=st.tool_calls)
            st.attempts.append(Attempt(n=n, origin="shared", sha256=news.source.sha256, lines=news.source.lines,
                                       config=news.config, evals=[digest], tool_call=st.tool_calls))
            st.best = BestKernel(attempt=n, source=news.source, verdict=news.verdict, speedup=news.speedup,
                                 tool_call=st.tool_calls)
            sp = f" at {news.speedup:.3g}x" if news.speedup is not None else ""
            if st.policy == "llm":
                st.current, st.current_source = n, news.source
                st.recent.append({"role": "user", "content": (
                    f"Agent {news.agent} found a faster kernel{sp}. It is now attempt {n}, your current candidate and "
                    f"your best: edit_kernel works on it and show_kernel() shows it.")})
            elif news.config is not None and all(t.key != config_key(news.config) for t in st.tuner.trials):
                st.tuner.trials.append(TunerTrial(key=config_key(news.config), config=news.config, attempt=n,
                                                  status="ok",
                                                  speedup=self._ranked(news.speedup, news.verdict.timing_meaningful),
                                                  latency_us=_geomean_latency(news.verdict)))
            await self._notebook(f"took over agent {news.agent}'s best{sp} as attempt {n}")
        if st.shared_failures and st.policy == "llm":
            st.recent.append({"role": "user", "content": "Other agents found these failures; do not repeat them:\n"
                                                         + "\n".join(f"- {x}" for x in st.shared_failures)})
        st.shared_failures = []

    async def _wait_if_paused(self) -> None:
        """A pause takes effect between tool calls: the one running finishes, the next waits for resume."""
        st = self.state
        if st.paused and not st.stop_requested:
            before = self.step
            self.step = "paused"
            self._details()
            await workflow.wait_condition(lambda: not self.state.paused or bool(self.state.stop_requested))
            self.step = before

    async def _start(self) -> None:
        st, spec = self.state, self.spec
        st.started_at = workflow.now()
        self.step = "preparing"
        try:
            setup: RunSetup = await workflow.execute_activity(
                names.PREPARE_RUN, PrepareInput(problem=spec.problem, problem_source=spec.problem_source,
                                                kernel=spec.kernel, source=spec.source,
                                                eval=spec.eval, inline_source_cap=spec.inline_source_cap),
                result_type=RunSetup, start_to_close_timeout=timedelta(seconds=spec.tool_timeout_s),
                heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout_s),
                retry_policy=RetryPolicy(maximum_attempts=5), summary=f"prepare {spec.problem} from {spec.kernel}")
        except ActivityError as err:
            self._fault_over(names.PREPARE_RUN)
            raise ApplicationError(f"cannot start the run: {err.cause or err}", type="BadRunSpec",
                                   non_retryable=True) from err
        st.setup = setup
        await self._recovered(names.PREPARE_RUN)
        st.attempts.append(Attempt(n=0, origin="start", sha256=setup.start.sha256, lines=setup.start.lines,
                                   config=setup.config))
        st.current, st.current_source = 0, setup.start
        await self._notebook(f"start: {spec.problem}, {setup.kernel_label} kernel as attempt 0, policy {st.policy}, "
                             f"budget {st.budget_tool_calls} tool calls / {st.budget_hours:g} h")
        text = await self._tool(names.PROFILE_KERNEL, {}, call_id="start")
        goal = self._goal()
        st.memory = (spec.memory.model_copy(update={"goal": goal, "hints": list(st.hints)}) if spec.memory
                     else empty_memory(goal, hints=st.hints))
        if st.policy == "llm":
            st.recent.append({"role": "user", "content": (
                f"The starting kernel is attempt 0 ({setup.kernel_label}). Its profile:\n{text}\n\n"
                f"Make it faster while keeping it correct. Use the tools; show_kernel() shows its source.")})
        if st.policy == "tuner" and setup.config is not None:
            a0 = st.attempts[0]
            e = a0.evals[-1] if a0.evals else None
            st.tuner.trials.append(TunerTrial(key=config_key(setup.config), config=setup.config, attempt=0,
                                              status=e.status if e else "crashed",
                                              latency_us=e.latency_us if e else None,
                                              speedup=self._ranked(e.speedup, self._timing_meaningful.get(0, True))
                                              if e else None))

    def _goal(self) -> Goal:
        st, spec = self.state, self.spec
        setup = st.setup
        baselines: list[str] = []
        start_eval = st.attempts[0].evals[-1] if st.attempts and st.attempts[0].evals else None
        if start_eval is not None:
            baselines = list(start_eval.speedups)
        target = "be faster than every baseline on every shape, and stay correct"
        if st.target_speedup:
            target = f"reach {st.target_speedup:g}x over the strongest baseline on every shape (the run stops there)"
        if start_eval is not None and start_eval.latency_us is not None:
            vs = ", ".join(f"{v:.3g}x vs {k}" for k, v in start_eval.speedups.items())
            target += f"; the starting kernel measured {start_eval.latency_us:.4g} us" + (f" ({vs})" if vs else "")
        return Goal(problem=setup.problem, statement=setup.statement, target=target, baselines=baselines,
                    shapes=_shapes_text(setup), device=setup.device)

    # ------------------------------------------------------------------------- budgets, hops
    def _hours_used(self) -> float:
        st = self.state
        if st.started_at is None:
            return 0.0
        now = workflow.now()
        paused = st.paused_s + ((now - st.paused_since).total_seconds() if st.paused and st.paused_since else 0.0)
        return max(0.0, ((now - st.started_at).total_seconds() - paused) / 3600.0)

    def _finished(self) -> str | None:
        st = self.state
        if st.stop_reason:
            return st.stop_reason
        if st.stop_requested:
            return f"stopped: {st.stop_requested}"
        if st.tool_calls >= st.budget_tool_calls:
            return f"tool-call budget spent ({st.tool_calls} of {st.budget_tool_calls})"
        if self._hours_used() >= st.budget_hours:
            return f"time budget spent ({self._hours_used():.2f} h of {st.budget_hours:g} h)"
        if st.target_speedup and st.best and (st.best.speedup or 0.0) >= st.target_speedup:
            return f"target reached: {st.best.speedup:.3f}x >= {st.target_speedup:g}x"
        if st.tuner.exhausted:
            return "search space exhausted"
        if st.idle_turns >= self.spec.max_idle_turns:
            return f"the model made no tool call in {st.idle_turns} turns in a row"
        return None

    def _continue_as_new_due(self) -> bool:
        info = workflow.info()
        return (self.turns_this_segment >= self.spec.continue_as_new_every
                or info.is_continue_as_new_suggested()
                or info.get_current_history_size() >= self.spec.max_history_bytes)

    async def _continue_as_new(self) -> None:
        st = self.state
        self.step = "continuing as new"
        await workflow.wait_condition(workflow.all_handlers_finished)
        info = workflow.info()
        size = info.get_current_history_size()
        st.segment += 1
        st.segment_histories.append(size)
        pruned = self._prune_state()
        if pruned:
            await self._notebook(pruned)
        await self._notebook(f"continue-as-new {st.segment}: segment of {info.get_current_history_length()} events, "
                             f"{size / 1e6:.2f} MB, after {self.turns_this_segment} turns; {st.tool_calls} tool calls so far")
        self._upsert_search_attributes(force=True)
        workflow.continue_as_new(self.spec.model_copy(update={"carry": st}), memo=self._memo())

    def _prune_state(self) -> str | None:
        """Keep the state carried across continue-as-new under spec.max_state_bytes: drop the oldest ledger
        entries (the history of earlier segments keeps them) and the evaluations of old attempts but their
        last. Deterministic: a function of the state alone."""
        st = self.state
        size = len(st.model_dump_json())
        if size <= self.spec.max_state_bytes:
            return None
        keep_ledger = max(200, len(st.ledger) // 2)
        dropped = len(st.ledger) - keep_ledger
        if dropped > 0:
            st.ledger = st.ledger[dropped:]
            st.ledger_pruned += dropped
        best = st.best.attempt if st.best else None
        for a in st.attempts[: max(0, len(st.attempts) - 100)]:
            if len(a.evals) > 1 and a.n != best:
                a.evals = [a.best_eval() or a.evals[-1]]
        st.segment_histories = st.segment_histories[-200:]
        return (f"pruned the carried state from {size / 1e3:.0f} kB to {len(st.model_dump_json()) / 1e3:.0f} kB "
                f"({max(dropped, 0)} old ledger entries; earlier segments' histories keep them)")

    def _memo(self) -> dict[str, Any]:
        st = self.state
        return {"problem": self.spec.problem, "policy": st.policy, "segment": st.segment,
                "started_at": st.started_at.isoformat() if st.started_at else None,
                "best_speedup": st.best.speedup if st.best else None}

    # -------------------------------------------------------------------------------- llm
    def _figures(self) -> LiveFigures:
        st = self.state
        b = st.best
        return LiveFigures(best_speedup=b.speedup if b else None,
                           best_latency_us=self._best_latency(), best_attempt=b.attempt if b else None,
                           tool_calls_used=st.tool_calls, tool_calls_budget=st.budget_tool_calls,
                           hours_used=round(self._hours_used(), 2), hours_budget=st.budget_hours)

    def _best_latency(self) -> float | None:
        b = self.state.best
        return _geomean_latency(b.verdict) if b is not None else None

    def _memory_best(self) -> MemoryBest | None:
        b = self.state.best
        if b is None:
            return None
        a = self.state.attempt(b.attempt)
        e = a.best_eval() if a else None
        return MemoryBest(attempt=b.attempt, source_sha256=b.source.sha256, latency_us=self._best_latency(),
                          speedups=dict(e.speedups) if e else {}, summary=_short(b.verdict.reason, 300))

    async def _compact(self, tokens_before: int | None = None) -> None:
        st, spec = self.state, self.spec
        self.step = f"compacting ({st.calls_since_compaction} tool calls since the last)"
        inp = CompactInput(memory=st.memory, transcript=clip_transcript(st.recent), attempts=st.window,
                           best=self._memory_best(), hints=st.hints, turn=st.turns,
                           model=spec.model if spec.model.configured else None, tokens_before=tokens_before)
        try:
            res: CompactResult = await workflow.execute_activity(
                names.COMPACT, inp, result_type=CompactResult,
                start_to_close_timeout=timedelta(seconds=spec.model.request_timeout_s + 60),
                heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout_s),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"compact {len(st.recent)} messages and {len(st.window)} evaluations (turn {st.turns})")
            st.memory = res.memory
            st.window = []  # summarized; on failure they wait for the next compaction instead
            line = res.line()
        except ActivityError as err:  # a failed compaction never stops the run
            line = f"compaction failed ({_short(str(err.cause or err), 200)}); kept the last {KEEP_TURNS} turns"
            st.window = st.window[-200:]  # bounded while compactions keep failing
        st.recent = tail_turns(st.recent, KEEP_TURNS, max_tokens=int(KEEP_FRACTION * spec.context_budget))
        st.calls_since_compaction = 0
        st.compactions += 1
        await self._notebook(line)

    def _prompt(self) -> list[dict[str, Any]]:
        """Goal block + memory + the last turns, within the context budget (compaction/prompt.py)."""
        st = self.state
        return build_messages(st.memory.goal, self._figures(), with_best(st.memory, self._memory_best()),
                              st.recent, self.spec.context_budget, reserve=tools_tokens(TOOLS))

    async def _llm_turn(self) -> None:
        st, spec = self.state, self.spec
        if spec.agent is not None:
            await self._take_shared()
        if st.pending_hints:
            st.recent.append({"role": "user", "content": "Hint from the user: " + "\n".join(st.pending_hints)})
            st.pending_hints = []
        estimated = estimate_prompt(st.memory.goal, self._figures(), st.memory, st.recent) + tools_tokens(TOOLS)
        if needs_compaction(st.calls_since_compaction, spec.compact_every, estimated, spec.context_budget):
            await self._compact(estimated)
        try:
            messages = self._prompt()
        except PromptBudgetError as exc:
            st.stop_reason = f"the context budget is too small: {exc}"
            return
        turn = st.turns + 1
        self.step = f"turn {turn}: waiting for {spec.model.model}"
        left_s = max(60.0, (st.budget_hours - self._hours_used()) * 3600.0)
        prompt_k = sum(len(json.dumps(m)) for m in messages) / 3500.0
        try:
            result: AgentTurnResult = await workflow.execute_activity(
                names.AGENT_TURN,
                AgentTurnInput(settings=spec.model, messages=messages, tools=TOOLS,
                               turn_key=f"{workflow.info().workflow_id}/{turn}"),
                result_type=AgentTurnResult,
                start_to_close_timeout=timedelta(seconds=spec.model.request_timeout_s + 30),
                schedule_to_close_timeout=timedelta(seconds=left_s),
                heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout_s),
                retry_policy=RetryPolicy(initial_interval=timedelta(seconds=spec.model.retry_initial_s),
                                         backoff_coefficient=2.0,
                                         maximum_interval=timedelta(seconds=spec.model.retry_max_s)),
                summary=f"turn {turn}: ask {spec.model.model} (~{prompt_k:.0f}k-token prompt, "
                        f"{st.tool_calls} tool calls so far)")
        except ActivityError as err:
            self._fault_over(names.AGENT_TURN)
            st.model_failures += 1
            why = _short(str(err.cause or err), 300)
            kind = err.cause.type if isinstance(err.cause, ApplicationError) else None
            if kind in ("ModelAuthError", "ModelConfigError") and workflow.patched(names.PATCH_FAULT_REPORTS):
                st.stop_reason = f"the model endpoint cannot be used: {why}"  # retrying cannot mend a key
            elif st.model_failures >= 2:
                st.stop_reason = (f"the prompt is over the model's context window even cut to the last turn: {why}; "
                                  f"a smaller --context-budget would fit it" if kind == "ModelContextLength"
                                  else f"the model endpoint failed: {why}")
            else:  # e.g. a context-length refusal: retry once with a shorter transcript
                st.recent = tail_turns(st.recent, 1)
                await self._notebook(f"turn {turn}: the model call failed ({why}); retrying with less context")
            return
        await self._recovered(names.AGENT_TURN)
        st.model_failures = 0
        st.tokens.calls += 1
        st.tokens.prompt_tokens += result.prompt_tokens
        st.tokens.completion_tokens += result.completion_tokens
        st.tokens.max_prompt_tokens = max(st.tokens.max_prompt_tokens, result.prompt_tokens)
        msg = result.message
        calls = msg.get("tool_calls") or []
        st.recent.append(msg)
        if not calls:
            st.idle_turns += 1
            st.recent.append({"role": "user", "content": "Continue: call one of the tools (write_kernel, edit_kernel, "
                                                          "compile_kernel, test_kernel, profile_kernel, ...)."})
            return
        st.idle_turns = 0
        thought = _short(msg.get("content") or "", 300)
        width = spec.eval.parallel
        i = 0
        while i < len(calls):
            j = i
            while j < len(calls) and (calls[j].get("function") or {}).get("name") in names.EVAL_TOOLS:
                j += 1
            if j - i > 1 and width > 1 and workflow.patched(names.PATCH_CONCURRENT_EVALS):
                # evaluations of one reply judge the same candidate: `width` at a time, one per GPU worker;
                # numbered and answered in the reply's order
                await self._wait_if_paused()
                for k in range(i, j, width):
                    group = calls[k:min(j, k + width)]
                    texts = await asyncio.gather(*(self._reply_call(c, thought, wait=False) for c in group))
                    for call, text in zip(group, texts):
                        st.recent.append({"role": "tool", "tool_call_id": call.get("id") or "", "content": text})
                i = j
                continue
            text = await self._reply_call(calls[i], thought)
            st.recent.append({"role": "tool", "tool_call_id": calls[i].get("id") or "", "content": text})
            i += 1

    async def _reply_call(self, call: dict[str, Any], thought: str, wait: bool = True) -> str:
        """One tool call of the model's reply, unless the run has finished meanwhile."""
        fn = call.get("function") or {}
        if wait:
            await self._wait_if_paused()
        reason = self._finished()
        if reason:
            return f"not run: {reason}"
        return await self._tool(fn.get("name") or "", fn.get("arguments"), call_id=call.get("id") or "",
                                thought=thought)

    # ------------------------------------------------------------------------------ tuner
    async def _tuner_step(self) -> None:
        st = self.state
        setup = st.setup
        role = self.spec.agent
        if role is not None:
            await self._take_shared()
        if self.spec.compact_every and st.calls_since_compaction >= self.spec.compact_every:
            await self._compact()  # the tuner's memory (deterministic): what it tried, what won
        if not setup.tunables or setup.config is None:
            st.stop_reason = "the starting kernel declares no TUNABLES/CONFIG: nothing to tune"
            return
        if setup.start.text is None:
            st.stop_reason = "the starting kernel is over the inline cap: the tuner needs it inline"
            return
        if st.budget_tool_calls - st.tool_calls < 2:
            st.stop_reason = f"tool-call budget spent ({st.tool_calls} of {st.budget_tool_calls}; a configuration takes 2)"
            return
        # write up to `parallel` untried configurations, then profile them at once (one per GPU worker)
        written: list[tuple[TunerTrial, int, str, int, SourceRef]] = []  # trial, its number, thought, attempt, source
        while len(written) < self.spec.eval.parallel and st.budget_tool_calls - st.tool_calls >= 2:
            cfg = next_config(setup.tunables, st.tuner.trials, setup.config,
                              share=(role.index - 1, role.of) if role is not None else None)
            if cfg is None:
                st.tuner.exhausted = not written
                break
            trial = TunerTrial(key=config_key(cfg), config=cfg)
            st.tuner.trials.append(trial)
            try:
                source = with_config(setup.start.text, cfg)
            except TunablesError as exc:
                trial.status = "write_failed"
                await self._notebook(f"tuner: cannot write {_fmt_cfg(cfg)}: {exc}")
                continue
            tried = len(st.tuner.trials)
            thought = f"tuner: configuration {tried} of {space_size(setup.tunables)}: {_fmt_cfg(cfg)}"
            await self._tool("write_kernel", {"source": source}, call_id=f"tuner-{tried}-write", thought=thought,
                             origin="tuner")
            a = st.attempt(st.current) if st.current is not None else None
            if a is None or a.origin != "tuner" or a.config != cfg:
                trial.status = "write_failed"
                continue
            trial.attempt = a.n
            written.append((trial, tried, thought, a.n, st.current_source))
        if not written:
            return
        await self._wait_if_paused()

        async def profile(trial: TunerTrial, tried: int, thought: str, n: int, source: SourceRef) -> None:
            await self._tool(names.PROFILE_KERNEL, {}, call_id=f"tuner-{tried}-profile", thought=thought, target=(n, source))
            e = st.attempts[n].evals[-1] if st.attempts[n].evals else None
            trial.status = e.status if e else "crashed"
            trial.latency_us = e.latency_us if e else None
            trial.speedup = self._ranked(e.speedup, self._timing_meaningful.get(n, True)) if e else None

        await asyncio.gather(*(profile(*w) for w in written))

    # ------------------------------------------------------------------------------ tools
    async def _tool(self, name: str, arguments: Any, *, call_id: str, thought: str = "", origin: str = "",
                    target: tuple[int, SourceRef] | None = None) -> str:
        """Run one tool call as one activity; record it in the ledger; return what the model reads.
        `target` (an attempt and its source) lets an evaluation run beside others on an attempt other
        than the current one; its number is taken when it starts, so calls in flight together differ."""
        st = self.state
        st.tool_calls += 1
        seq = st.tool_calls
        args, error = parse_call(name, arguments)
        attempt: int | None = target[0] if target else st.current
        if error is not None:
            text, ok = error, False
        else:
            self.step = f"tool call {seq}: {name}"
            self._details()
            try:
                text, ok, attempt = await self._run_tool(name, args, seq, thought, origin, target)
                await self._recovered(name)
                if self._outbox:
                    await self._tell_run()
            except ActivityError as err:
                self._fault_over(name)
                cause = err.cause or err
                text = (f"infrastructure error: {name} failed after its retries ({_short(str(cause), 400)}). "
                        f"Nothing was learned about the kernel; you may try again.")
                ok = False
                if workflow.patched(names.PATCH_FAULT_REPORTS):
                    await self._notebook(f"tool call {seq} ({name}) failed: {_short(str(cause), 300)}")
        st.calls_since_compaction += 1
        # in seq order, also when calls in flight together finish out of order
        bisect.insort(st.ledger, ToolCallRecord(seq=seq, tool=name, call_id=call_id, attempt=attempt, ok=ok,
                                                summary=_short(text.splitlines()[0] if text else "")),
                      key=lambda r: r.seq)
        self._upsert_search_attributes()
        return text

    def _opts(self, summary: str, gpu: bool = False) -> dict[str, Any]:
        spec = self.spec
        if gpu:
            ev = spec.eval
            return dict(task_queue=spec.gpu_task_queue, start_to_close_timeout=timedelta(seconds=ev.timeout_s + 900),
                        heartbeat_timeout=timedelta(seconds=ev.heartbeat_timeout_s),
                        retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2),
                                                 maximum_interval=timedelta(seconds=60),
                                                 maximum_attempts=ev.max_attempts),
                        summary=summary)
        return dict(start_to_close_timeout=timedelta(seconds=spec.tool_timeout_s),
                    heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout_s),
                    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1),
                                             maximum_interval=timedelta(seconds=30), maximum_attempts=5),
                    summary=summary)

    def _context(self, n: int | None) -> str:
        a = self.state.attempt(n) if n is not None else None
        if a is None:
            return ""
        bits = [a.origin + (f" of {a.parent}" if a.parent is not None else "")]
        if a.config:
            bits.append(_fmt_cfg(a.config))
        return " (" + "; ".join(bits) + ")"

    async def _run_tool(self, name: str, args: Any, seq: int, thought: str, origin: str,
                        target: tuple[int, SourceRef] | None = None) -> tuple[str, bool, int | None]:
        st, spec = self.state, self.spec
        setup = st.setup
        cap = spec.tool_output_cap
        if name in ("write_kernel", "edit_kernel"):
            n = len(st.attempts)
            if name == "write_kernel":
                res: ToolResult = await workflow.execute_activity(
                    names.WRITE_KERNEL, WriteInput(source=args.source, attempt=n, entry_point=setup.entry_point,
                                                   inline_cap=spec.inline_source_cap, max_bytes=spec.max_source_bytes,
                                                   output_cap=cap),
                    result_type=ToolResult, **self._opts(
                        f"write attempt {n}" + (f": {thought}" if origin == "tuner" else f" (tool call {seq})")))
            else:
                if st.current_source is None:
                    return "refused: there is no current candidate to edit; write_kernel first", False, None
                res = await workflow.execute_activity(
                    names.EDIT_KERNEL, EditInput(current=st.current_source, old=args.old, new=args.new, attempt=n,
                                                 entry_point=setup.entry_point, inline_cap=spec.inline_source_cap,
                                                 max_bytes=spec.max_source_bytes, output_cap=cap),
                    result_type=ToolResult, **self._opts(f"edit attempt {st.current} into {n} (tool call {seq})"))
            if not res.ok or res.source is None:
                return res.text, False, st.current
            st.attempts.append(Attempt(n=n, origin=origin or ("write" if name == "write_kernel" else "edit"),
                                       parent=0 if origin == "tuner" else st.current, sha256=res.source.sha256, lines=res.source.lines,
                                       config=res.config, tool_call=seq))
            st.current, st.current_source = n, res.source
            return res.text, True, n

        if name in names.EVAL_TOOLS:
            n, source = target if target else (st.current, st.current_source)
            verb = name.removesuffix("_kernel")
            best = f"; best {st.best.speedup:.3g}x @ {st.best.attempt}" if st.best and st.best.speedup else ""
            settings = spec.eval if st.policy == "llm" else spec.eval.model_copy(update={"ncu": False})
            res_e: EvalResult = await workflow.execute_activity(  # (the tuner reads no Nsight metrics)
                name, EvalInput(tool=name, problem=setup.problem, problem_source=spec.problem_source, attempt=n,
                                source=source,
                                settings=settings, output_cap=cap),
                result_type=EvalResult, **self._opts(f"{verb} attempt {n}{self._context(n)}{best}", gpu=True))
            d = res_e.digest.model_copy(update={"tool_call": seq})
            self._timing_meaningful[n] = res_e.verdict.timing_meaningful
            bisect.insort(st.attempts[n].evals, d, key=lambda e: e.tool_call)
            if setup.shape_set is None and not setup.shapes:
                setup.shapes = [r.shape for r in res_e.verdict.shapes]
            new_best = self._consider_best(n, res_e, source)
            st.window.append(AttemptDigest(attempt=n, tool=name, status=d.status, summary=_short(d.reason, 200),
                                           latency_us=d.latency_us, speedup=d.speedups,
                                           config=st.attempts[n].config, note=thought or None))
            line = f"{verb} attempt {n}: {d.status}"
            if d.latency_us is not None and not res_e.verdict.timing_meaningful:  # a speedup there is noise
                line += f", {duration_us(d.latency_us)} in the CPU's interpreter"
            elif d.speedup is not None:
                line += f", {d.speedup:.3g}x vs {d.baseline}"
            elif d.latency_us is not None:
                line += f", {d.latency_us:.4g} us"
            if d.status != "ok":
                line += f" ({_short(d.reason, 100)})"
                if spec.agent is not None:
                    self._outbox.append(AgentNews(agent=spec.agent.index, kind="failure", line=(
                        f"{verb} of a {st.attempts[n].origin} attempt{self._context(n)}: {d.status}: {_short(d.reason, 200)}")))
            if new_best:
                line += " (new best)"
            await self._notebook(line + self._context(n))
            return res_e.text, d.status == "ok", n

        if name == "show_kernel":
            if args.attempt is None:
                n, ref, label = st.current, st.current_source, f"attempt {st.current} (the current candidate)"
            elif args.attempt == -1:
                if st.best is None:
                    return "there is no best kernel yet (no profiled ok kernel)", False, None
                n, ref, label = st.best.attempt, st.best.source, f"attempt {st.best.attempt} (the best)"
            else:
                a = st.attempt(args.attempt)
                if a is None:
                    return f"there is no attempt {args.attempt}; attempts run from 0 to {len(st.attempts) - 1}", False, None
                n, label = a.n, f"attempt {a.n}"
                ref = (st.current_source if a.n == st.current else st.best.source if st.best and st.best.attempt == a.n
                       else SourceRef(sha256=a.sha256, lines=a.lines))
            res = await workflow.execute_activity(names.SHOW_KERNEL, ShowInput(label=label, source=ref,
                                                                               output_cap=max(cap, spec.inline_source_cap)),
                                                  result_type=ToolResult, **self._opts(f"show {label} (tool call {seq})"))
            return res.text, res.ok, n

        if name == "list_attempts":
            limit = max(1, min(args.limit, 200))
            res = await workflow.execute_activity(
                names.LIST_ATTEMPTS, ListInput(attempts=st.attempts[-limit:], total=len(st.attempts),
                                               best=st.best.attempt if st.best else None, current=st.current,
                                               output_cap=cap),
                result_type=ToolResult, **self._opts(f"list the last {limit} attempts (tool call {seq})"))
            return res.text, res.ok, None

        if name == "note":
            res = await workflow.execute_activity(
                names.NOTE, NoteInput(workflow_id=workflow.info().workflow_id, seq=seq, text=args.text, output_cap=cap),
                result_type=ToolResult, **self._opts(f"note: {_short(args.text, 80)}"))
            if res.ok:
                st.notes = (st.notes + [_short(args.text, 1000)])[-NOTES_KEPT:]
            return res.text, res.ok, None
        raise ApplicationError(f"no dispatch for tool {name}")  # parse_call knows every tool

    def _ranked(self, speedup: float | None, timing_meaningful: bool) -> float | None:
        """The speedup the best and the tuner rank by: none where the times are a CPU interpreter's, whose
        speedup divides one noisy CPU time by another; they rank by the kernel's own interpreter time there."""
        if speedup is not None and not timing_meaningful and workflow.patched(names.PATCH_UNTIMED_RANKING):
            return None
        return speedup

    def _consider_best(self, n: int, res: EvalResult, source: SourceRef) -> bool:
        """Only ok verdicts of a profile count; higher speedup wins, or lower latency without baselines
        (or on a CPU: see _ranked)."""
        st = self.state
        v, d = res.verdict, res.digest
        if d.status != "ok" or d.mode != "full":
            return False
        if st.best is not None:
            cur = st.best
            speedup = self._ranked(d.speedup, v.timing_meaningful)
            cur_speedup = self._ranked(cur.speedup, cur.verdict.timing_meaningful)
            if speedup is not None and cur_speedup is not None:
                if speedup <= cur_speedup:
                    return False
            else:
                cur_lat = self._best_latency()
                if cur_lat is not None and (d.latency_us is None or d.latency_us >= cur_lat):
                    return False
        st.best = BestKernel(attempt=n, source=source, verdict=v, speedup=d.speedup, tool_call=st.tool_calls + 1)
        self._upsert_search_attributes(force=True)
        if self.spec.agent is not None:
            sp = f" at {d.speedup:.3g}x" if d.speedup is not None else ""
            self._outbox.append(AgentNews(agent=self.spec.agent.index, kind="best", line=f"new best{sp} (its attempt {n})",
                                          source=source, verdict=v, speedup=d.speedup, config=st.attempts[n].config))
        return True

    # ------------------------------------------------------------------ notebook, UI, report
    async def _notebook(self, line: str) -> None:
        st = self.state
        st.notebook = (st.notebook + [line])[-NOTEBOOK_LINES:]
        self._details()
        try:
            await workflow.execute_local_activity(
                names.NOTEBOOK, NotebookEntry(workflow_id=workflow.info().workflow_id, line=line),
                start_to_close_timeout=timedelta(seconds=10), retry_policy=RetryPolicy(maximum_attempts=3),
                summary=_short(line, 200))
        except ActivityError:  # e.g. a full disk: the line stays in the state (status, Web UI); the run goes on
            pass

    # ---------------------------------------------------------------------- faults
    @workflow.signal(name=names.FAULT_SIGNAL)
    async def activity_fault(self, raw: Any) -> None:
        """An activity's attempt failed and Temporal retries it: show what fails and since when; the first
        failure of a streak goes into the notebook."""
        try:
            fault = Fault.model_validate(raw)
        except ValidationError:
            return
        cur = self.fault
        same = cur is not None and cur.activity == fault.activity and cur.since == fault.since
        if same and fault.attempt <= cur.attempt:
            return
        self.fault = fault
        self._details()
        if not same:
            await self._notebook(f"{fault.activity} failing: {fault.message}; retrying")

    def _fault_over(self, activity: str) -> Fault | None:
        """The fault recorded for `activity`, now over (its call returned or failed for good)."""
        f = self.fault
        if f is None or f.activity != activity:
            return None
        self.fault = None
        return f

    async def _recovered(self, activity: str) -> None:
        f = self._fault_over(activity)
        if f is not None:
            took = (workflow.now() - f.since).total_seconds()
            await self._notebook(f"{activity} recovered after {took:.0f} s and {f.attempt} failed "
                                 f"attempt{'s' if f.attempt != 1 else ''} (last: {_short(f.message, 200)})")

    def _best_line(self) -> str:
        b = self.state.best
        if b is None:
            return "no ok kernel yet"
        if not b.verdict.timing_meaningful and self._best_latency() is not None:  # a CPU's: its speedup is noise
            return f"best attempt {b.attempt}, {duration_us(self._best_latency())} in the CPU's interpreter"
        return f"best attempt {b.attempt}" + (f" at {b.speedup:.3g}x" if b.speedup is not None else "")

    def _details(self) -> None:
        st = self.state
        head = (f"**{self.spec.problem}** ({st.policy}): {self.step}. {st.tool_calls}/{st.budget_tool_calls} tool calls, "
                f"{self._hours_used():.2f}/{st.budget_hours:g} h, {self._best_line()}.")
        if self.fault is not None:
            head += f"\n\n**Failing:** {self.fault.line(workflow.now())}"
        workflow.set_current_details(head + "\n\n" + "\n".join(f"- {x}" for x in st.notebook[-15:]))

    def _upsert_search_attributes(self, force: bool = False) -> None:
        st = self.state
        if not self.spec.search_attributes:
            return
        if not force and st.tool_calls - self._search_attributes_at < SEARCH_ATTRIBUTE_EVERY:
            return
        self._search_attributes_at = st.tool_calls
        updates = [names.SA_PROBLEM.value_set(self.spec.problem), names.SA_POLICY.value_set(st.policy),
                   names.SA_TOOL_CALLS.value_set(st.tool_calls)]
        if st.best is not None and st.best.speedup is not None:
            updates.append(names.SA_BEST_SPEEDUP.value_set(float(st.best.speedup)))
        workflow.upsert_search_attributes(updates)

    def _report(self) -> RunReport:
        st = self.state
        best = None
        if st.best is not None:
            best = BestReport(attempt=st.best.attempt, source=st.best.source.text, sha256=st.best.source.sha256,
                              speedup=st.best.speedup, verdict=st.best.verdict)
        return RunReport(workflow_id=workflow.info().workflow_id, problem=self.spec.problem, policy=st.policy,
                         stop_reason=st.stop_reason or "", tool_calls=st.tool_calls, turns=st.turns,
                         attempts=len(st.attempts), continue_as_new=st.segment, compactions=st.compactions,
                         hours=round(self._hours_used(), 4), tokens=st.tokens, best=best,
                         best_sweep=st.best_sweep, segment_history_bytes=st.segment_histories, ledger=st.attempts,
                         notes=st.notes, memory=st.memory, agents=st.agents)

    def _status(self) -> RunStatus:
        st = self.state
        phase = ("finished" if self.step == "finished" else "paused" if st.paused and self.step == "paused"
                 else "pausing" if st.paused
                 else "stopping" if st.stop_requested else "starting" if st.setup is None else "running")
        return RunStatus(problem=self.spec.problem, policy=st.policy, phase=phase, step=self.step,
                         tool_calls=st.tool_calls, tool_calls_budget=st.budget_tool_calls, turns=st.turns,
                         hours_used=round(self._hours_used(), 4), hours_budget=st.budget_hours,
                         best_speedup=st.best.speedup if st.best else None,
                         best_attempt=st.best.attempt if st.best else None, attempts=len(st.attempts),
                         continue_as_new=st.segment, compactions=st.compactions, tokens=st.tokens,
                         notebook=st.notebook[-NOTEBOOK_LINES:], stop_reason=st.stop_reason, fault=self.fault)

    # ---------------------------------------------------------------- queries and updates
    @workflow.query
    def status(self) -> RunStatus:
        return self._status()

    @workflow.query
    def attempts(self) -> list[Attempt]:
        return self.state.attempts

    @workflow.query
    def best(self) -> BestReport | None:
        b = self.state.best
        if b is None:
            return None
        return BestReport(attempt=b.attempt, source=b.source.text, sha256=b.source.sha256, speedup=b.speedup,
                          verdict=b.verdict)

    @workflow.query
    def ledger(self) -> list[ToolCallRecord]:
        return self.state.ledger

    @workflow.update
    def stop(self, reason: Any = "") -> str:
        self.state.stop_requested = reason or "asked to stop"
        return f"stopping after the current tool call ({self.state.tool_calls} done)"

    @stop.validator
    def _validate_stop(self, reason: Any = "") -> None:
        _text_arg(reason, "stop", MAX_STOP_REASON_CHARS)

    @workflow.update
    def pause(self) -> str:
        self._set_paused(True)
        return f"paused after the current tool call ({self.state.tool_calls} done)"

    @workflow.update
    def resume(self) -> str:
        self._set_paused(False)
        return "running"

    def _set_paused(self, paused: bool) -> None:
        st = self.state
        if paused and not st.paused:
            st.paused, st.paused_since = True, workflow.now()
        elif not paused and st.paused:
            if st.paused_since is not None:
                st.paused_s += (workflow.now() - st.paused_since).total_seconds()
            st.paused, st.paused_since = False, None

    @workflow.update
    def hint(self, text: Any) -> str:
        st = self.state
        st.hints.append(text)
        st.pending_hints.append(text)
        if st.memory is not None:
            st.memory.hints = list(st.hints)
        return f"hint {len(st.hints)} recorded; the model sees it on its next turn"

    @hint.validator
    def _validate_hint(self, text: Any) -> None:
        if not _text_arg(text, "hint", MAX_HINT_CHARS).strip():
            raise ValueError("an empty hint")

    @workflow.update
    def extend(self, ext: Any) -> RunStatus:
        self._extend(_parse_update(Extension, ext, "extend"))
        return self._status()

    def _extend(self, ext: Extension) -> None:
        st = self.state
        st.budget_hours += ext.hours
        st.budget_tool_calls += ext.tool_calls
        if ext.target_speedup is not None:
            st.target_speedup = ext.target_speedup

    @extend.validator
    def _validate_extend(self, ext: Any) -> None:
        _parse_update(Extension, ext, "extend")  # Extension's constraints: it adds, never takes away
