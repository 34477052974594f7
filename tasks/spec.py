"""A task: a folder with `task.toml`, the files an agent may edit, a metric to improve and a guard
that must keep passing. Read here into a `TaskBundle`, which carries the folder by value (its text
files), so that a run, a resumed run and a scheduled one measure exactly what was submitted, and no
worker path ever enters a workflow input.

    name = "slow_suite"
    statement = "Make the test suite faster without changing what it checks."
    files = ["src/*.py"]                  # globs the agent may edit; nothing else changes
    guard = "python -m pytest -q tests"  # must pass for a candidate to count (or a table: command, expect)
    repeat = 5                            # runs per measurement: the median counts
    timeout_s = 120                       # per command; the whole process tree dies at the limit
    [metric]
    command = "python -m pytest -q tests"
    read = "wall_time"                    # wall_time | failure_rate | "METRIC <name>" | "regex:<pattern>"
    direction = "lower"

Torch-free and Temporal-free: the CLI, the workflow's models and the worker all import it."""
from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tasks import patterns

TASK_FILE = "task.toml"
MAX_BUNDLE_BYTES = 4 * 2**20  # the folder's text files, all together
MAX_FILE_BYTES = 1 * 2**20
MAX_FILES = 2000
MAX_TIMEOUT_S = 86400.0
MAX_REPEAT = 200
# never carried: tools' caches and installs, which `setup` makes again on the worker
SKIPPED_DIRS = {".git", "node_modules", "__pycache__", ".pytest_cache", ".venv", "venv", ".mypy_cache", "dist"}
# matched over a command's output in the worker: by RE2, in linear time (tasks/patterns.py)
METRIC_LINE = patterns.compile(r"^METRIC\s+([A-Za-z0-9_.\-]+)\s*=\s*([-+0-9.eE]+|inf|nan)\s*$", patterns.MULTILINE)


class TaskError(ValueError):
    """A task folder or bundle that cannot be used; the message is one line naming what is wrong."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Metric(_Strict):
    command: str = Field(min_length=1, max_length=4000)
    # how the number is read: the command's own wall time, the fraction of its runs that fail, a line
    # `METRIC <name>=<value>` it prints, or the first group of a regular expression over its output
    read: str = Field(default="wall_time", max_length=400)
    direction: Literal["lower", "higher"] = "lower"
    unit: str = Field(default="", max_length=20)  # shown beside the figures; defaults by `read`

    @field_validator("read")
    @classmethod
    def _read(cls, v: str) -> str:
        if v in ("wall_time", "failure_rate"):
            return v
        if v.startswith("METRIC ") and re.fullmatch(r"[A-Za-z0-9_.\-]+", v[7:].strip()):
            return "METRIC " + v[7:].strip()
        if v.startswith("regex:"):
            if patterns.compile(v[6:]).groups < 1:  # PatternError: a ValueError, one line
                raise ValueError("the regular expression needs one group: the number")
            return v
        raise ValueError("must be wall_time, failure_rate, 'METRIC <name>' or 'regex:<pattern with one group>'")

    @property
    def shown_unit(self) -> str:
        return self.unit or {"wall_time": "s", "failure_rate": "failed runs"}.get(self.read, "")


class Guard(_Strict):
    """A command that must pass (exit 0) for a candidate to count. `expect`: a regular expression its
    output must match; where it has a group holding a number (tests run, say), the candidate's may
    not be below the starting files' (a candidate that ends the test runner early fails here)."""
    command: str = Field(min_length=1, max_length=4000)
    expect: str | None = Field(default=None, max_length=400)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, v):
        return {"command": v} if isinstance(v, str) else v

    @field_validator("expect")
    @classmethod
    def _expect(cls, v: str | None) -> str | None:
        if v is not None:
            patterns.compile(v)  # PatternError (a ValueError, one line) where RE2 cannot take it
        return v


class Tunable(_Strict):
    """A knob for the model-free tuner: in `file`, the first group of `pattern`'s first match is
    replaced by each of `values` in turn."""
    file: str = Field(min_length=1, max_length=400)
    pattern: str = Field(min_length=1, max_length=400)
    values: list[str] = Field(min_length=1, max_length=64)

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: str) -> str:
        if patterns.compile(v).groups < 1:  # PatternError where RE2 cannot take it
            raise ValueError("needs one group: the text that the values replace")
        return v


class TaskSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,80}$")
    statement: str = Field(min_length=1, max_length=20000)
    files: list[str] = Field(min_length=1, max_length=100)
    metric: Metric
    guard: Guard | None = None
    setup: str | None = Field(default=None, max_length=4000)  # once per worker and task, network allowed
    repeat: int = Field(default=3, ge=1, le=MAX_REPEAT)
    timeout_s: float = Field(default=300.0, gt=0, le=MAX_TIMEOUT_S)
    tunables: dict[str, Tunable] = Field(default_factory=dict, max_length=32)

    @field_validator("files")
    @classmethod
    def _globs(cls, v: list[str]) -> list[str]:
        for g in v:
            _relative(g, "a glob in files")
        return v

    @model_validator(mode="after")
    def _tunables_in_scope(self) -> "TaskSpec":
        for name, t in self.tunables.items():
            if not editable(self, t.file):
                raise ValueError(f"tunable {name}: {t.file} is not among the files the agent may edit")
        return self


def _relative(path: str, what: str) -> PurePosixPath:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or "\\" in path or "\x00" in path:
        raise ValueError(f"{what} must be a relative path inside the task folder, not {path!r}")
    return p


def editable(spec: TaskSpec, path: str) -> bool:
    """May the agent change this file? Only what `files` names, and only a relative path inside the
    folder (a glob's `*` also matches `/` and `..`: `src/*.py` matches `src/../../x.py`); never task.toml."""
    try:
        _relative(path, "a file")
    except ValueError:
        return False
    if path == TASK_FILE:
        return False
    return any(fnmatch.fnmatchcase(path, g) or PurePosixPath(path).match(g) for g in spec.files)


class TaskBundle(BaseModel):
    """A task by value: its spec and every text file of its folder (relative POSIX path -> text)."""
    model_config = ConfigDict(extra="forbid")
    spec: TaskSpec
    files: dict[str, str]

    @field_validator("files")
    @classmethod
    def _files(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > MAX_FILES:
            raise ValueError(f"{len(v)} files; a task carries at most {MAX_FILES}")
        total = 0
        for path, text in v.items():
            _relative(path, "a file of the task")
            size = len(text.encode())
            if size > MAX_FILE_BYTES:
                raise ValueError(f"{path} is {size} bytes; a task's file may have {MAX_FILE_BYTES}")
            total += size
        if total > MAX_BUNDLE_BYTES:
            raise ValueError(f"the task's files are {total} bytes together; the limit is {MAX_BUNDLE_BYTES}")
        return v

    @model_validator(mode="after")
    def _editable_files_exist(self) -> "TaskBundle":
        if not self.starting_files():
            raise ValueError(f"no file of the task matches files = {self.spec.files}")
        for name, t in self.spec.tunables.items():
            if t.file not in self.files:
                raise ValueError(f"tunable {name}: the task has no file {t.file}")
            if not patterns.search(t.pattern, self.files[t.file]):
                raise ValueError(f"tunable {name}: {t.pattern!r} matches nothing in {t.file}")
        return self

    def starting_files(self) -> dict[str, str]:
        """The editable files as the task gives them: the baseline every attempt is measured against."""
        return {p: t for p, t in sorted(self.files.items()) if editable(self.spec, p)}

    def digest(self) -> str:
        """Content address of the whole task (spec and files): a worker's prepared copy is keyed by it."""
        blob = json.dumps({"spec": self.spec.model_dump(mode="json"), "files": self.files}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


def describe(err: ValidationError, where: str) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        parts.append(f"{loc}: {e['msg'].removeprefix('Value error, ')}" if loc else e["msg"].removeprefix("Value error, "))
    return f"{where}: " + "; ".join(parts)


def load_task(folder: str | Path) -> TaskBundle:
    """The bundle of a task folder on this machine. Raises TaskError with one line."""
    root = Path(folder)
    toml_path = root / TASK_FILE
    if not toml_path.is_file():
        raise TaskError(f"{folder}: no {TASK_FILE} there; a task is a folder with a {TASK_FILE}")
    if toml_path.stat().st_size > MAX_FILE_BYTES:  # weighed before it is read, as every file below
        raise TaskError(f"{toml_path}: {toml_path.stat().st_size} bytes; a task's file may have {MAX_FILE_BYTES}")
    try:
        raw = tomllib.loads(toml_path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskError(f"{toml_path}: not valid TOML: {exc}") from None
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as exc:
        raise TaskError(describe(exc, str(toml_path))) from None
    files: dict[str, str] = {}
    total = 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_DIRS for part in rel.parts) or not path.is_file() or path.is_symlink():
            continue
        size = path.stat().st_size  # weighed before it is read: a sparse 1 TB file is no read of 1 TB
        total += size
        if size > MAX_FILE_BYTES:
            raise TaskError(f"{path}: {size} bytes; a task's file may have {MAX_FILE_BYTES} (make large files in `setup`)")
        if total > MAX_BUNDLE_BYTES:
            raise TaskError(f"{folder}: its files are more than {MAX_BUNDLE_BYTES} bytes together (make large "
                            "files in `setup`)")
        try:
            files[rel.as_posix()] = path.read_text()
        except UnicodeDecodeError:
            if editable(spec, rel.as_posix()):
                raise TaskError(f"{path}: an editable file must be text (UTF-8)") from None
            raise TaskError(f"{path}: a task carries text files only; make binary files in `setup`") from None
    try:
        return TaskBundle(spec=spec, files=files)
    except ValidationError as exc:
        raise TaskError(describe(exc, str(folder))) from None
