"""The policies: what decides the run's next tool calls, behind one small interface. `llm`
(workflows/llm_policy.py): a model turn, its tool calls run in order. `tuner`
(workflows/tuner_policy.py): the next untried configurations of the starting kernel's TUNABLES, written
and profiled, no model. The run loop (workflows/kernel_optimization.py) knows only this interface."""
from __future__ import annotations

from typing import Any, Protocol

from workflows.dispatch import ToolDispatch
from workflows.islands import Islands
from workflows.llm_policy import LlmPolicy
from workflows.run import Run
from workflows.tuner_policy import TunerPolicy


class Policy(Protocol):
    def begin(self, start_profile: str) -> None:
        """Once, after the starting kernel's profile (`start_profile`: what its profile call answered)."""

    async def step(self) -> None:
        """One turn: a model turn and its tool calls, or a tuner step."""

    async def end(self) -> None:
        """Once, after the loop."""

    def agent_intro(self, agent: int, of: int, share: int) -> list[dict[str, Any]]:
        """What an agent of an islands run is told first, beside what the run said so far."""


def policy_for(run: Run, tools: ToolDispatch, islands: Islands) -> Policy:
    return (LlmPolicy if run.state.policy == "llm" else TunerPolicy)(run, tools, islands)
