"""The `tuner` policy: no model. Each step writes the next untried configurations of the starting
kernel's TUNABLES (workflows/tuner.py ranks them), up to `eval.parallel`, and profiles them at once (one
per GPU worker). Its memory is the deterministic ledger of what it tried. Runs inside the workflow."""
from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from kernels.problems.tunables import TunablesError, with_config
    from tasks import tunables as task_tunables
    from workflows import names
    from kernels.labels import config_label
    from workflows.models import AgentNews, SourceRef, TunerTrial
    from workflows.tuner import config_key, next_config, space_size
    from workflows.yardstick import geomean_latency

from workflows import memory
from workflows.dispatch import ToolDispatch
from workflows.islands import Islands
from workflows.run import Run


class TunerPolicy:
    def __init__(self, run: Run, tools: ToolDispatch, islands: Islands) -> None:
        self.run, self.tools, self.islands = run, tools, islands

    def begin(self, start_profile: str) -> None:
        """The starting configuration is the first trial, as its profile judged it."""
        st = self.run.state
        if st.setup.config is None:
            return
        a0 = st.attempts[0]
        e = a0.evals[-1] if a0.evals else None
        st.tuner.trials.append(TunerTrial(key=config_key(st.setup.config), config=st.setup.config, attempt=0,
                                          status=e.status if e else "crashed", latency_us=e.latency_us if e else None,
                                          speedup=self.run.ranked(e.speedup, e.timing_meaningful) if e else None))

    async def end(self) -> None:
        st = self.run.state
        if st.window and not st.agents:
            await memory.compact(self.run)  # the tuner's memory: what it tried, what won

    def agent_intro(self, agent: int, of: int, share: int) -> list[dict[str, Any]]:
        return []  # no model to tell: the agents split the space by a hash of each configuration (tuner.owns)

    def _adopt(self, news: AgentNews, n: int) -> None:
        """Another agent's best is a trial measured ok: the climb goes on from it."""
        st = self.run.state
        if news.config is not None and all(t.key != config_key(news.config) for t in st.tuner.trials):
            st.tuner.trials.append(TunerTrial(key=config_key(news.config), config=news.config, attempt=n,
                                              status="ok",
                                              speedup=self.run.ranked(news.speedup, news.verdict.timing_meaningful),
                                              latency_us=geomean_latency(news.verdict)))

    async def step(self) -> None:
        run, st, spec = self.run, self.run.state, self.run.spec
        setup, role = st.setup, spec.agent
        if role is not None:
            await self.islands.take_shared(self._adopt)
        if spec.compact_every and st.calls_since_compaction >= spec.compact_every:
            await memory.compact(run)  # the tuner's memory (deterministic): what it tried, what won
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
        while len(written) < spec.eval.parallel and st.budget_tool_calls - st.tool_calls >= 2:
            cfg = next_config(setup.tunables, st.tuner.trials, setup.config,
                              share=(role.index - 1, role.of) if role is not None else None)
            if cfg is None:
                st.tuner.exhausted = not written
                break
            trial = TunerTrial(key=config_key(cfg), config=cfg)
            st.tuner.trials.append(trial)
            try:
                source = (task_tunables.with_config(spec.task, setup.start.text, cfg) if spec.task is not None
                          else with_config(setup.start.text, cfg))
            except (TunablesError, task_tunables.TaskTunablesError) as exc:
                trial.status = "write_failed"
                await run.notebook(f"tuner: cannot write {config_label(cfg)}: {exc}")
                continue
            tried = len(st.tuner.trials)
            thought = f"tuner: configuration {tried} of {space_size(setup.tunables)}: {config_label(cfg)}"
            await self.tools.call(names.WRITE_KERNEL, {"source": source}, call_id=f"tuner-{tried}-write",
                                  thought=thought, origin="tuner")
            a = st.attempt(st.current) if st.current is not None else None
            if spec.task is not None and a is not None and a.origin == "tuner" and a.config is None:
                a.config = cfg  # a task's knobs live in task.toml: the tuner knows what it wrote
            if a is None or a.origin != "tuner" or a.config != cfg:
                trial.status = "write_failed"
                continue
            trial.attempt = a.n
            written.append((trial, tried, thought, a.n, st.current_source))
        if not written:
            return
        await run.wait_if_paused()

        async def profile(trial: TunerTrial, tried: int, thought: str, n: int, source: SourceRef) -> None:
            await self.tools.call(names.PROFILE_KERNEL, {}, call_id=f"tuner-{tried}-profile", thought=thought,
                                  target=(n, source))
            e = st.attempts[n].evals[-1] if st.attempts[n].evals else None
            trial.status = e.status if e else "crashed"
            trial.latency_us = e.latency_us if e else None
            trial.speedup = run.ranked(e.speedup, e.timing_meaningful) if e else None

        await asyncio.gather(*(profile(*w) for w in written))
