"""Record the workflow histories the replay test (tests/test_workflow_replay.py) runs through Temporal's
Replayer. Re-record after an intended change to the workflow's decisions, and say so in the commit:

    .venv/bin/python tests/histories/record.py

It runs, against a fresh dev server and a fake model endpoint: an llm run of a few turns with a
compaction, a hint (an update) and a continue-as-new hop; and a short tuner run. Each run segment's
history is written as JSON next to this file."""
from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE.parent)]

import worker  # noqa: E402
from fake_openai import FakeOpenAI, completion  # noqa: E402
from marathon_support import mla_variant, queues, segments, start, workers  # noqa: E402
from workflows.models import Budgets, EvalSettings, ModelSettings, RunSpec  # noqa: E402

SCRIPT = {
    1: [("note", {"text": "plan: BLOCK_S=32"}), ("write_kernel", {"source": mla_variant(BLOCK_S=32)})],
    2: [("edit_kernel", '{"old": oops'), ("list_attempts", {})],
    3: [("show_kernel", {"attempt": 0}), ("note", {"text": "hint received"})],
    4: [("edit_kernel", {"old": "'BLOCK_S': 32", "new": "'BLOCK_S': 64"}), ("show_kernel", {})],
}


def script(turn, delivery, request):
    if turn < 0:
        return completion("not a summary")  # compaction falls back to the deterministic memory
    return completion(f"turn {turn}", SCRIPT.get(turn, [("list_attempts", {})]), turn=turn)


async def record(address: str, tmp: Path) -> None:
    tq, gq = queues()
    with FakeOpenAI(script) as fake:
        async with workers(address, tq, gq, tmp / "artifacts") as client:
            llm = RunSpec(problem="mla_decode", model=ModelSettings(model="fake", base_url=fake.base_url, api_key_env=""),
                          budgets=Budgets(max_tool_calls=9), eval=EvalSettings(device="cpu"), gpu_task_queue=gq,
                          continue_as_new_every=2, compact_every=4)
            handle = await start(client, llm, tq, workflow_id="replay-llm")
            while not any(s.turn == 2 for s in fake.seen):
                await asyncio.sleep(0.2)
            await client.get_workflow_handle("replay-llm").execute_update("hint", "try BLOCK_S=64")
            await handle.result()
            for i, seg in enumerate(await segments(client, handle.id, handle.result_run_id)):
                (HERE / f"llm_segment{i}.json").write_text(seg["history"].to_json())
            tuner = RunSpec(problem="mla_decode", budgets=Budgets(max_tool_calls=3), eval=EvalSettings(device="cpu"),
                            gpu_task_queue=gq)
            handle = await start(client, tuner, tq, workflow_id="replay-tuner")
            await handle.result()
            for i, seg in enumerate(await segments(client, handle.id, handle.result_run_id)):
                (HERE / f"tuner_segment{i}.json").write_text(seg["history"].to_json())


def main() -> int:
    for old in HERE.glob("*_segment*.json"):
        old.unlink()
    with worker.DevServer() as srv, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(record(srv.address, Path(tmp)))
    for p in sorted(HERE.glob("*.json")):
        print(p.name, p.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
