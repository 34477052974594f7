"""The tools the model may call: their OpenAI function definitions, and the parsing of the arguments a
model sends. Pure: runs inside the workflow. Malformed arguments become an error message the model
reads, never an exception."""
from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from workflows import names


class _Args(BaseModel):
    model_config = ConfigDict(extra="ignore")


class WriteArgs(_Args):
    source: str


class EditArgs(_Args):
    old: str
    new: str


class NoArgs(_Args):
    pass


class ShowArgs(_Args):
    attempt: int | None = None  # None: the current candidate; -1: the best


class ListArgs(_Args):
    limit: int = 30


class NoteArgs(_Args):
    text: str


ARGS: dict[str, type[_Args]] = {
    names.WRITE_KERNEL: WriteArgs, names.EDIT_KERNEL: EditArgs, names.COMPILE_KERNEL: NoArgs,
    names.TEST_KERNEL: NoArgs, names.PROFILE_KERNEL: NoArgs, names.SHOW_KERNEL: ShowArgs,
    names.LIST_ATTEMPTS: ListArgs, names.NOTE: NoteArgs,
}


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}}}


TOOLS: list[dict[str, Any]] = [
    _fn("write_kernel", "Replace the current candidate with a complete new kernel module (Python + Triton). "
        "It becomes a new attempt; nothing is evaluated until you compile, test or profile it.",
        {"source": {"type": "string", "description": "the whole module source"}}, ["source"]),
    _fn("edit_kernel", "Search and replace in the current candidate: `old` must occur exactly once, "
        "whitespace included. The result becomes a new attempt.",
        {"old": {"type": "string"}, "new": {"type": "string"}}, ["old", "new"]),
    _fn("compile_kernel", "Import the current candidate and run it once on the first shape (no checking). "
        "Cheap: use it to catch compile errors.", {}, []),
    _fn("test_kernel", "Check the current candidate's correctness against the reference on every shape, "
        "with fresh random inputs.", {}, []),
    _fn("profile_kernel", "Check correctness and time the current candidate against the baselines: latency, "
        "speedup per baseline, % of the roofline, and Nsight Compute metrics where available. Only a "
        "profiled OK kernel can become the best.", {}, []),
    _fn("show_kernel", "Show the source of an attempt (default: the current candidate; -1: the best).",
        {"attempt": {"type": "integer"}}, []),
    _fn("list_attempts", "List recent attempts with their status, speedup and latency.",
        {"limit": {"type": "integer", "description": "how many of the most recent (default 30)"}}, []),
    _fn("note", "Write a note to your lab notebook: a hypothesis, a finding, a plan. Notes are kept in your "
        "memory for the rest of the run.", {"text": {"type": "string"}}, ["text"]),
]


# A task's run (tasks/) offers the same tools under names that say what they do there; the dispatch
# maps them to the canonical ones, so the activities and the history are the same for both.
TASK_ALIASES = {"write_files": names.WRITE_KERNEL, "edit_files": names.EDIT_KERNEL, "check_guard": names.TEST_KERNEL,
                "measure": names.PROFILE_KERNEL, "show_files": names.SHOW_KERNEL}

TASK_TOOLS: list[dict[str, Any]] = [
    _fn("write_files", "Replace the current candidate with a new text of files: each file you change under its own "
        "line `### file: <path>`, then its whole content (a file you leave out keeps the task's version). It "
        "becomes a new attempt; nothing is measured until you check or measure it.",
        {"source": {"type": "string", "description": "the files, each under its '### file: <path>' line"}}, ["source"]),
    _fn("edit_files", "Search and replace in the current candidate's text: `old` must occur exactly once, "
        "whitespace included. The result becomes a new attempt.",
        {"old": {"type": "string"}, "new": {"type": "string"}}, ["old", "new"]),
    _fn("check_guard", "Run the task's guard (its tests) on the current candidate, in a fresh copy of the task.", {}, []),
    _fn("measure", "Run the guard, then measure the task's figure for the current candidate and for the task's own "
        "files in the same call, runs interleaved. Only a measured ok candidate can become the best.", {}, []),
    _fn("show_files", "Show the text of an attempt (default: the current candidate; -1: the best).",
        {"attempt": {"type": "integer"}}, []),
    *[t for t in TOOLS if t["function"]["name"] in (names.LIST_ATTEMPTS, names.NOTE)],
]


def canonical(name: str) -> str:
    """The tool a name stands for (a task's name for it, or itself)."""
    return TASK_ALIASES.get(name, name)


def tools_for(task: bool) -> list[dict[str, Any]]:
    return TASK_TOOLS if task else TOOLS


def _signature(name: str) -> str:
    props = next(t["function"]["parameters"]["properties"] for t in TOOLS + TASK_TOOLS if t["function"]["name"] == name)
    return "{" + ", ".join(f'"{k}": {v["type"]}' for k, v in props.items()) + "}"


def parse_call(name: str, arguments: str | dict | None) -> tuple[_Args | None, str | None]:
    """(parsed arguments, None) or (None, the error message the model gets back)."""
    if name not in ARGS:
        return None, (f"error: there is no tool {name!r}; the tools are: {', '.join(ARGS)}")
    if isinstance(arguments, dict):
        data: Any = arguments
    else:
        text = (arguments or "").strip() or "{}"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, (f"error: the arguments of {name} are not valid JSON ({exc.msg} at character {exc.pos}); "
                          f"send a JSON object like {_signature(name)}")
    if not isinstance(data, dict):
        return None, f"error: the arguments of {name} must be a JSON object like {_signature(name)}"
    try:
        return ARGS[name].model_validate(data), None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
        return None, f"error: bad arguments for {name}: {problems}; expected {_signature(name)}"
