"""Replay: recorded histories (tests/histories/, written by tests/record_histories.py) run through Temporal's
Replayer against today's workflow code. A failure here means the workflow's decisions changed for
histories that already exist: runs in flight would break on a worker upgrade. Re-record only for an
intended change, and only when no run of the old code needs to continue."""
from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows import names
from workflows.kernel_optimization import KernelOptimization

HISTORIES = sorted((Path(__file__).resolve().parents[1] / "histories").glob("*_segment*.json"))


def test_histories_are_recorded():
    names = {p.name for p in HISTORIES}
    assert {"llm_segment0.json", "llm_segment1.json", "tuner_segment0.json", "tuner_parallel_segment0.json",
            "islands_segment0.json", "islands_agent1_segment0.json", "islands_agent2_segment0.json",
            "islands_verified_segment0.json", "islands_verified_agent1_segment0.json",
            "islands_verified_agent2_segment0.json"} <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_replay(path):
    raw = json.loads(path.read_text())
    # the id it was recorded under (record_histories.py): a run's commands name it, e.g. its agents' child workflow ids
    workflow_id = "replay-" + path.stem.rsplit("_segment", 1)[0].replace("_", "-")
    started = raw["events"][0]["workflowExecutionStartedEventAttributes"]
    parent = started.get("parentWorkflowExecution")
    if parent is not None:  # an agent: its id names its run's (check_origin holds it to that)
        index = int(re.search(r"_agent(\d+)_segment", path.name).group(1))
        workflow_id = names.agent_id(parent["workflowId"], index)
    history = WorkflowHistory.from_json(workflow_id, raw)
    types = {e.get("eventType") for e in raw["events"]}
    assert "EVENT_TYPE_ACTIVITY_TASK_COMPLETED" in types
    replayer = Replayer(workflows=[KernelOptimization], data_converter=pydantic_data_converter)
    result = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=True))
    assert result.replay_failure is None
