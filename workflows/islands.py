"""Islands: a run of `agents` > 1 runs its agents as child workflows (`<run id>/agent-i`), each with its
own context, memory and share of the tool calls. What one finds goes through the run to the others as
a signal (AGENT_NEWS_SIGNAL): a new best, checked against the run's recorded verdicts before anyone
takes it (workflows/evidence.py), and a failure worth not repeating; the run's controls (stop, hint,
pause, resume, extend) reach its agents the same way. Both sides live here: the run (`run_agents`,
`on_news`) and an agent (`share`, `tell_run`, `on_news`, `take_shared`). Runs inside the workflow."""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from workflows import names
    from workflows.inputs import hint_refusal
    from workflows.models import (AgentLine, AgentNews, AgentRole, Attempt, EvalDigest, Extension, RunBest,
                                  RunReport, RunState, SourceRef)
    from workflows.yardstick import beats, geomean_latency

from workflows import control, evidence
from workflows.run import Run, short

Intro = Callable[[int, int, int], list[dict[str, Any]]]  # (agent, of, its tool calls) -> its first messages
Adopt = Callable[[AgentNews, int], None]  # a policy taking another agent's best over, as attempt n


class Islands:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.outbox: list[AgentNews] = []  # an agent's news for the run, sent after the tool call that made it
        self.children: dict[int, Any] = {}  # in the run: agent -> its child workflow handle
        self.done: set[int] = set()

    # --------------------------------------------------------------------------------- the run
    async def run_agents(self, intro: Intro) -> None:
        """Run the agents as child workflows, each from this run's profiled start with an even share of
        the tool calls left; their news comes here as a signal and goes on to the others. The children
        are durable as this run is: a dead worker replays them, and their results land in its history."""
        run, st, spec = self.run, self.run.state, self.run.spec
        n = spec.agents
        left = st.budget_tool_calls - st.tool_calls
        hours = max(st.budget_hours - run.hours_used(), 1e-6)
        wid = workflow.info().workflow_id
        run.step = f"running {n} agents"
        await run.notebook(f"islands: {n} agents as child workflows sharing {left} tool calls, the best kernel "
                           f"and the failures worth not repeating")

        async def agent(i: int) -> tuple[AgentLine, RunReport | None]:
            share = left // n + (1 if i <= left % n else 0)
            carry = RunState(setup=st.setup, policy=st.policy, started_at=workflow.now(), budget_hours=hours,
                             budget_tool_calls=share, target_speedup=st.target_speedup,
                             attempts=[a.model_copy(deep=True) for a in st.attempts], current=st.current,
                             current_source=st.current_source, best=st.best, memory=st.memory,
                             recent=list(st.recent) + intro(i, n, share),
                             hints=list(st.hints), tuner=st.tuner.model_copy(deep=True))
            child = spec.model_copy(update={
                "agents": 1, "agent": AgentRole(index=i, of=n), "carry": carry,
                "budgets": spec.budgets.model_copy(update={"hours": hours, "max_tool_calls": share}),
                "eval": spec.eval.model_copy(update={"sweep_best": False})})  # the run checks its best once
            cid = names.agent_id(wid, i)
            try:
                handle = await workflow.start_child_workflow(names.WORKFLOW_TYPE, child, id=cid, result_type=RunReport,
                                                             static_summary=f"agent {i} of {n} in {wid}")
                self.children[i] = handle
                rep: RunReport = await handle
            except ChildWorkflowError as err:
                self.done.add(i)
                return AgentLine(agent=i, workflow_id=cid, status=f"failed: {short(str(err.cause or err), 200)}"), None
            self.done.add(i)
            line = AgentLine(agent=i, workflow_id=cid, status=rep.stop_reason, tool_calls=rep.tool_calls,
                             attempts=rep.attempts, best_speedup=rep.best.speedup if rep.best else None,
                             best_attempt=rep.best.attempt if rep.best else None,
                             shared_taken=sum(1 for a in rep.ledger if a.origin == "shared"))
            await run.notebook(f"agent {i}: {line.status}; {line.tool_calls} tool calls, best "
                               + (f"{line.best_speedup:.3g}x" if line.best_speedup is not None else "none"))
            return line, rep

        results = await asyncio.gather(self._forward_controls(), *(agent(i) for i in range(1, n + 1)))
        await workflow.wait_condition(workflow.all_handlers_finished)
        lines_reports: list[tuple[AgentLine, RunReport | None]] = list(results[1:])
        st.agents = [line for line, _ in lines_reports]
        st.tool_calls += sum(line.tool_calls for line in st.agents)
        st.turns += sum(r.turns for _, r in lines_reports if r is not None)
        await self._take_the_winner(lines_reports)
        st.stop_reason = f"{n} agents finished: " + "; ".join(f"agent {x.agent}: {short(x.status, 80)}" for x in st.agents)

    async def _forward_controls(self) -> None:
        """A stop, a hint, a pause or a resume given to the run reaches every agent; an extension is split
        among the agents still going as the budget was."""
        st, n = self.run.state, self.run.spec.agents
        hints_sent, paused = len(st.hints), st.paused
        calls, hours_budget, target = st.budget_tool_calls, st.budget_hours, st.target_speedup
        while True:
            await workflow.wait_condition(lambda: len(self.done) == n or bool(st.stop_requested)
                                          or len(st.hints) > hints_sent or st.paused != paused
                                          or (st.budget_tool_calls, st.budget_hours, st.target_speedup)
                                          != (calls, hours_budget, target))
            if len(self.done) == n:
                return
            for h in st.hints[hints_sent:]:
                await self.tell_agents(AgentNews(kind="hint", line=h))
            hints_sent = len(st.hints)
            if st.paused != paused:
                paused = st.paused
                await self.tell_agents(AgentNews(kind="pause" if paused else "resume"))
            if (st.budget_tool_calls, st.budget_hours, st.target_speedup) != (calls, hours_budget, target):
                going = [i for i in range(1, n + 1) if i not in self.done]
                more = st.budget_tool_calls - calls
                for k, i in enumerate(going):
                    ext = Extension(hours=st.budget_hours - hours_budget, target_speedup=st.target_speedup,
                                    tool_calls=more // len(going) + (1 if k < more % len(going) else 0))
                    await self.tell_agents(AgentNews(kind="extend", extension=ext), only=i)
                calls, hours_budget, target = st.budget_tool_calls, st.budget_hours, st.target_speedup
            if st.stop_requested:
                await self.tell_agents(AgentNews(kind="stop", line=st.stop_requested))
                return

    async def _take_the_winner(self, lines_reports: list[tuple[AgentLine, RunReport | None]]) -> None:
        """The run's best: the agents' bests, ranked by the yardstick, each taken only as the run's recorded
        verdicts have it."""
        run, st = self.run, self.run.state
        winner = None
        verify = workflow.patched(names.PATCH_VERIFIED_BESTS)
        for line, r in lines_reports:
            if r is None or r.best is None or not beats(
                    run.ranked(r.best.speedup, r.best.verdict.timing_meaningful), geomean_latency(r.best.verdict),
                    run.best_ranked(), run.best_latency()):
                continue
            if not verify:
                st.best = RunBest(attempt=r.best.attempt, source=SourceRef(sha256=r.best.sha256, text=r.best.source),
                                  verdict=r.best.verdict, speedup=r.best.speedup)
                winner = line.agent
                continue
            found = await evidence.recorded_verdict(run, r.best.sha256)
            if found is None:
                await run.notebook(f"agent {line.agent}'s best (its attempt {r.best.attempt}) is not among the "
                                   f"verdicts this run's evaluations recorded: not taken")
                continue
            if beats(run.ranked(found.digest.speedup, found.verdict.timing_meaningful), found.digest.latency_us,
                     run.best_ranked(), run.best_latency()):
                st.best = RunBest(attempt=r.best.attempt, source=found.source, verdict=found.verdict,
                                  speedup=found.digest.speedup)
                winner = line.agent
        if winner is not None:
            await run.notebook(f"the best kernel is agent {winner}'s attempt {st.best.attempt}")

    async def tell_agents(self, news: AgentNews, only: int | None = None) -> None:
        for i, handle in list(self.children.items()):
            if i == news.agent or i in self.done or (only is not None and i != only):
                continue
            try:
                await handle.signal(names.AGENT_NEWS_SIGNAL, news)
            except Exception:  # the agent finished meanwhile: it needs no news
                pass

    # ------------------------------------------------------------------------------- an agent
    def share(self, news: AgentNews) -> None:
        """News for the run, sent once the tool call that made it is over (tell_run)."""
        self.outbox.append(news)

    async def tell_run(self) -> None:
        if not self.outbox:
            return
        parent = workflow.info().parent
        news, self.outbox = self.outbox, []
        if parent is None or self.run.spec.agent is None:
            return
        for item in news:
            try:
                await workflow.get_external_workflow_handle(parent.workflow_id).signal(names.AGENT_NEWS_SIGNAL, item)
            except Exception:  # the run is gone (terminated): the agent goes on alone
                pass

    async def on_news(self, news: AgentNews) -> None:
        """AGENT_NEWS_SIGNAL, validated. The run notes a best (once verified) or a failure and passes it on;
        an agent keeps a verified best for its next turn, and obeys the run's controls."""
        run, st = self.run, self.run.state
        verify = workflow.patched(names.PATCH_VERIFIED_BESTS)
        if run.spec.agent is None:
            if news.kind in ("best", "failure"):
                if verify and run.spec.agents == 1:
                    return  # a run without agents hears from none
                if verify and news.kind == "best":
                    news = await evidence.verified(run, news)
                    if news is None:
                        return
                await run.notebook(f"agent {news.agent}: {short(news.line, 200)}")
                await self.tell_agents(news)
            return
        if news.kind == "best" and verify:
            news = await evidence.verified(run, news)
            if news is None:
                return
        if news.kind == "best":
            cur = st.shared_best
            if cur is None or beats(run.ranked(news.speedup, news.verdict.timing_meaningful),
                                    geomean_latency(news.verdict),
                                    run.ranked(cur.speedup, cur.verdict.timing_meaningful), geomean_latency(cur.verdict)):
                st.shared_best = news
        elif news.kind == "failure":
            st.shared_failures = (st.shared_failures + [short(news.line, 300)])[-20:]
        elif news.kind == "stop":
            st.stop_requested = st.stop_requested or news.line or "the run was asked to stop"
        elif news.kind == "hint":
            refused = hint_refusal(st.hints, [news.line])
            if refused:  # the run's own hints are within the bound: this is no hint of the run's
                workflow.logger.warning(f"dropped a hint in {names.AGENT_NEWS_SIGNAL}: {refused}")
            else:
                st.hints.append(news.line)
                st.pending_hints.append(news.line)
        elif news.kind in ("pause", "resume"):
            run.set_paused(news.kind == "pause")
        elif news.kind == "extend" and news.extension is not None:
            refused = control.extension_refusal(run, news.extension)
            if refused:  # the run's own shares stay within the bounds: this is no extension of the run's
                workflow.logger.warning(f"dropped an extension in {names.AGENT_NEWS_SIGNAL}: {refused}")
            else:
                run.extend(news.extension)

    async def take_shared(self, adopt: Adopt) -> list[str]:
        """Between turns: take over another agent's best when it beats this agent's own (it becomes the best,
        and `adopt` makes it the policy's starting point), and hand back the failures the others found."""
        run, st = self.run, self.run.state
        news, st.shared_best = st.shared_best, None
        if news is not None and news.source is not None and news.verdict is not None and beats(
                run.ranked(news.speedup, news.verdict.timing_meaningful), geomean_latency(news.verdict),
                run.best_ranked(), run.best_latency()):
            n = len(st.attempts)
            digest = EvalDigest(tool=names.PROFILE_KERNEL, mode="full", status=news.verdict.status,
                                reason=short(news.verdict.reason, 300), speedup=news.speedup,
                                latency_us=geomean_latency(news.verdict), tool_call=st.tool_calls)
            st.attempts.append(Attempt(n=n, origin="shared", sha256=news.source.sha256, lines=news.source.lines,
                                       config=news.config, evals=[digest], tool_call=st.tool_calls))
            st.best = RunBest(attempt=n, source=news.source, verdict=news.verdict, speedup=news.speedup,
                              tool_call=st.tool_calls)
            adopt(news, n)
            sp = f" at {news.speedup:.3g}x" if news.speedup is not None else ""
            await run.notebook(f"took over agent {news.agent}'s best{sp} as attempt {n}")
        failures, st.shared_failures = st.shared_failures, []
        return failures
