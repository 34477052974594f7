"""Record the workflow histories the replay test (tests/test_workflow_replay.py) runs through Temporal's
Replayer. Re-record after an intended change to the workflow's decisions, and say so in the commit:

    .venv/bin/python tests/record_histories.py [llm] [tuner] [tuner_parallel] [islands] [islands_verified] [faults] [auth]
    (default: all)

It runs, against a fresh dev server and a fake model endpoint: an llm run of a few turns with a
compaction, a hint (an update) and a continue-as-new hop; a short tuner run; and a tuner run that
profiles two configurations at once on two evaluation workers; an llm run of two agents (child
workflows sharing their bests through the run's signals) whose replies' evaluations run two at once,
recorded twice: before (`islands`) and after (`islands_verified`) shared bests were looked up among the
run's recorded verdicts;
and two of the chaos drills
(serving/chaos.py): the model endpoint down for a while (fault signals, recovery), and a 401 that
ends the run. Each run segment's history is written
as JSON in tests/histories/. Naming runs re-records only those (keeping older recordings replayed
against newer code is what tells a change apart that would break runs in flight)."""
from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from marathon_support import mla_variant, mla_wrong, queues, segments, start, workers  # tests/, this script's folder
from serving.dev_server import DevServer
from serving.scripted_model import FakeOpenAI, completion
from workflows.models import Budgets, EvalSettings, ModelSettings, RunSpec

HISTORIES = Path(__file__).resolve().parent / "histories"

SCRIPT = {
    1: [("note", {"text": "plan: BLOCK_S=32"}), ("write_kernel", {"source": mla_variant(BLOCK_S=32)})],
    2: [("edit_kernel", '{"old": oops'), ("list_attempts", {})],
    3: [("show_kernel", {"attempt": 0}), ("note", {"text": "hint received"})],
    4: [("edit_kernel", {"old": "'BLOCK_S': 32", "new": "'BLOCK_S': 64"}), ("show_kernel", {})],
}


ISLANDS_SCRIPT = [("write_kernel", {"source": mla_variant(BLOCK_S=32)}), ("compile_kernel", {}), ("test_kernel", {}),
                  ("profile_kernel", {})]


def islands_script(turn, delivery, request):
    """Each agent: a new kernel judged three ways in one reply, then a reply without a tool call (its end)."""
    return completion(f"turn {turn}", ISLANDS_SCRIPT if turn == 1 else [], turn=turn)


def script(turn, delivery, request):
    if turn < 0:
        return completion("not a summary")  # compaction falls back to the deterministic memory
    return completion(f"turn {turn}", SCRIPT.get(turn, [("list_attempts", {})]), turn=turn)


async def record(address: str, tmp: Path, runs: set[str]) -> None:
    tq, gq = queues()

    async def keep(client, handle, name: str) -> None:
        await handle.result()
        first = handle.result_run_id or (await handle.describe()).run_id  # an agent's handle: by its id alone
        for i, seg in enumerate(await segments(client, handle.id, first)):
            (HISTORIES / f"{name}_segment{i}.json").write_text(seg["history"].to_json())

    with FakeOpenAI(script) as fake:
        async with workers(address, tq, gq, tmp / "artifacts") as client, \
                workers(address, tq, gq, tmp / "artifacts-2", control=False):
            if "tuner_parallel" in runs:
                both = RunSpec(problem="mla_decode", budgets=Budgets(max_tool_calls=5),
                               eval=EvalSettings(device="cpu", parallel=2), gpu_task_queue=gq)
                await keep(client, await start(client, both, tq, workflow_id="replay-tuner-parallel"), "tuner_parallel")
            for name in ("islands", "islands_verified"):
                if name not in runs:
                    continue
                wid = "replay-" + name.replace("_", "-")
                with FakeOpenAI(islands_script) as agents_model:
                    # from a wrong kernel: an agent's first ok profile is a new best, shared with the other
                    islands = RunSpec(problem="mla_decode", source=mla_wrong(), agents=2, max_idle_turns=1,
                                      model=ModelSettings(model="fake", base_url=agents_model.base_url, api_key_env=""),
                                      budgets=Budgets(max_tool_calls=11), eval=EvalSettings(device="cpu", parallel=2),
                                      gpu_task_queue=gq)
                    handle = await start(client, islands, tq, workflow_id=wid)
                    await keep(client, handle, name)
                for i in (1, 2):
                    await keep(client, client.get_workflow_handle(f"{wid}/agent-{i}"), f"{name}_agent{i}")
            if "llm" not in runs and "tuner" not in runs:
                return
            llm = RunSpec(problem="mla_decode", model=ModelSettings(model="fake", base_url=fake.base_url, api_key_env=""),
                          budgets=Budgets(max_tool_calls=9), eval=EvalSettings(device="cpu"), gpu_task_queue=gq,
                          continue_as_new_every=2, compact_every=4)
            if "llm" in runs:
                handle = await start(client, llm, tq, workflow_id="replay-llm")
                while not any(s.turn == 2 for s in fake.seen):
                    await asyncio.sleep(0.2)
                await client.get_workflow_handle("replay-llm").execute_update("hint", "try BLOCK_S=64")
                await keep(client, handle, "llm")
            if "tuner" in runs:
                tuner = RunSpec(problem="mla_decode", budgets=Budgets(max_tool_calls=3),
                                eval=EvalSettings(device="cpu"), gpu_task_queue=gq)
                await keep(client, await start(client, tuner, tq, workflow_id="replay-tuner"), "tuner")


RUNS = ("llm", "tuner", "tuner_parallel", "islands", "islands_verified", "faults", "auth")
CHAOS_RUNS = {"faults": "model-down", "auth": "model-401"}


def main() -> int:
    runs = set(sys.argv[1:]) or set(RUNS)
    unknown = runs - set(RUNS)
    if unknown:
        print(f"record_histories.py: no run named {', '.join(sorted(unknown))} (runs: {', '.join(RUNS)})", file=sys.stderr)
        return 2
    for name in runs:
        for old in HISTORIES.glob(f"{name}_segment*.json"):
            old.unlink()
    with DevServer() as srv, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(record(srv.address, Path(tmp), runs))
    for name, case in CHAOS_RUNS.items():
        if name in runs:
            from serving.chaos import run_case
            with tempfile.TemporaryDirectory() as tmp:
                out = asyncio.run(run_case(case, Path(tmp)))
            (HISTORIES / f"{name}_segment0.json").write_text(out.history_json)
    for p in sorted(HISTORIES.glob("*.json")):
        print(p.name, p.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
