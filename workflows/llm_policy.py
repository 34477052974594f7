"""The `llm` policy: each turn asks the model (the agent_turn activity) with the goal, the memory and the
last turns within the context budget, and runs the tool calls of its reply in order (a reply's
evaluations `eval.parallel` at a time). Runs inside the workflow."""
from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from compaction.prompt import (PromptBudgetError, build_messages, estimate_prompt, estimate_tokens,
                                   needs_compaction, tail_turns, token_scale, tools_tokens, with_best)
    from workflows import names
    from workflows.models import AgentNews, AgentTurnInput, AgentTurnResult
    from workflows.toolspec import canonical, tools_for

from workflows import memory
from workflows.dispatch import ToolDispatch
from workflows.islands import Islands
from workflows.run import Run, short


class LlmPolicy:
    def __init__(self, run: Run, tools: ToolDispatch, islands: Islands) -> None:
        self.run, self.tools, self.islands = run, tools, islands

    def begin(self, start_profile: str) -> None:
        self.run.state.recent.append({"role": "user", "content": (
            f"The starting kernel is attempt 0 ({self.run.state.setup.kernel_label}). Its profile:\n{start_profile}\n\n"
            f"Make it faster while keeping it correct. Use the tools; show_kernel() shows its source.")})

    async def end(self) -> None:
        pass

    def agent_intro(self, agent: int, of: int, share: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": (
            f"You are agent {agent} of {of} working on this problem at once, each with its own "
            f"{share} tool calls: try a direction of your own. A faster kernel another agent "
            f"finds will be handed to you, and so will its failures.")}]

    def _adopt(self, news: AgentNews, n: int) -> None:
        st = self.run.state
        sp = f" at {news.speedup:.3g}x" if news.speedup is not None else ""
        st.current, st.current_source = n, news.source
        st.recent.append({"role": "user", "content": (
            f"Agent {news.agent} found a faster kernel{sp}. It is now attempt {n}, your current candidate and "
            f"your best: edit_kernel works on it and show_kernel() shows it.")})

    def _tools(self) -> list[dict[str, Any]]:
        return tools_for(self.run.spec.task is not None)

    def _prompt(self) -> list[dict[str, Any]]:
        """Goal block + memory + the last turns, within the context budget (compaction/prompt.py)."""
        st = self.run.state
        return build_messages(st.memory.goal, memory.figures(self.run), with_best(st.memory, memory.memory_best(self.run)),
                              st.recent, self.run.context_budget(), reserve=tools_tokens(self._tools()))

    async def step(self) -> None:
        run, st, spec = self.run, self.run.state, self.run.spec
        if spec.agent is not None:
            failures = await self.islands.take_shared(self._adopt)
            if failures:
                st.recent.append({"role": "user", "content": "Other agents found these failures; do not repeat them:\n"
                                                             + "\n".join(f"- {x}" for x in failures)})
        if st.pending_hints:
            st.recent.append({"role": "user", "content": "Hint from the user: " + "\n".join(st.pending_hints)})
            st.pending_hints = []
        estimated = estimate_prompt(st.memory.goal, memory.figures(run), st.memory, st.recent) + tools_tokens(self._tools())
        if needs_compaction(st.calls_since_compaction, spec.compact_every, estimated, run.context_budget()):
            await memory.compact(run, estimated)
        try:
            messages = self._prompt()
        except PromptBudgetError as exc:
            st.stop_reason = f"the context budget is too small: {exc}"
            return
        result = await self._ask(messages)
        if result is None:
            return
        msg = result.message
        calls = msg.get("tool_calls") or []
        st.recent.append(msg)
        if not calls:
            st.idle_turns += 1
            st.recent.append({"role": "user", "content": "Continue: call one of the tools (write_kernel, edit_kernel, "
                                                          "compile_kernel, test_kernel, profile_kernel, ...)."})
            return
        st.idle_turns = 0
        await self._run_calls(calls, short(msg.get("content") or "", 300))

    async def _ask(self, messages: list[dict[str, Any]]) -> AgentTurnResult | None:
        """One model turn (the agent_turn activity), or None when it failed for good (the run may end)."""
        run, st, spec = self.run, self.run.state, self.run.spec
        turn = st.turns + 1
        run.step = f"turn {turn}: waiting for {spec.model.model}"
        left_s = max(60.0, (st.budget_hours - run.hours_used()) * 3600.0)
        prompt_k = sum(len(json.dumps(m)) for m in messages) / 3500.0
        try:
            result: AgentTurnResult = await workflow.execute_activity(
                names.AGENT_TURN,
                AgentTurnInput(settings=spec.model, messages=messages, tools=tools_for(spec.task is not None),
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
            run.fault_over(names.AGENT_TURN)
            st.model_failures += 1
            why = short(str(err.cause or err), 300)
            kind = err.cause.type if isinstance(err.cause, ApplicationError) else None
            if kind in ("ModelAuthError", "ModelConfigError") and workflow.patched(names.PATCH_FAULT_REPORTS):
                st.stop_reason = f"the model endpoint cannot be used: {why}"  # retrying cannot mend a key
            elif st.model_failures >= 2:
                st.stop_reason = (f"the prompt is over the model's context window even cut to the last turn: {why}; "
                                  f"a smaller --context-budget would fit it" if kind == "ModelContextLength"
                                  else f"the model endpoint failed: {why}")
            else:  # e.g. a context-length refusal: retry once with a shorter transcript
                st.recent = tail_turns(st.recent, 1)
                await run.notebook(f"turn {turn}: the model call failed ({why}); retrying with less context")
            return None
        await run.recovered(names.AGENT_TURN)
        st.model_failures = 0
        st.tokens.calls += 1
        st.tokens.prompt_tokens += result.prompt_tokens
        st.tokens.completion_tokens += result.completion_tokens
        st.tokens.max_prompt_tokens = max(st.tokens.max_prompt_tokens, result.prompt_tokens)
        if result.prompt_tokens and workflow.patched(names.PATCH_TOKEN_SCALE):
            st.token_scale = token_scale(st.token_scale, result.prompt_tokens,
                                         estimate_tokens(messages) + tools_tokens(self._tools()))
        return result

    async def _run_calls(self, calls: list[dict[str, Any]], thought: str) -> None:
        """The reply's tool calls, answered in its order; a run of evaluations in it, `eval.parallel` at a time."""
        run, st = self.run, self.run.state
        width = run.spec.eval.parallel
        i = 0
        while i < len(calls):
            j = i
            while j < len(calls) and canonical((calls[j].get("function") or {}).get("name") or "") in names.EVAL_TOOLS:
                j += 1
            if j - i > 1 and width > 1 and workflow.patched(names.PATCH_CONCURRENT_EVALS):
                # evaluations of one reply judge the same candidate: `width` at a time, one per GPU worker;
                # numbered and answered in the reply's order
                await run.wait_if_paused()
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
            await self.run.wait_if_paused()
        reason = self.run.finished()
        if reason:
            return f"not run: {reason}"
        return await self.tools.call(fn.get("name") or "", fn.get("arguments"), call_id=call.get("id") or "",
                                     thought=thought)
