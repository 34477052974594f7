"""A task's candidate as one text: its editable files, each under a header line. The loop stores,
shows, edits (search and replace) and hashes a candidate as text whatever the target is, so a
task's attempt is that text; `best.patch` is the diff of its files against the task's own.

    ### file: src/dedupe.py
    def dedupe(items):
        ...
    ### file: src/other.py
    ...
"""
from __future__ import annotations

import difflib
import re

from tasks.spec import TaskBundle, editable

HEADER = "### file: "
# the path runs to the line's end (its trailing blanks dropped in split): no lazy group before `\s*$`, which
# took time quadratic in a line of blanks (the candidate's text is the agent's) and, since \s takes line
# ends, ate a file's leading blank lines
_HEADER_LINE = re.compile(r"^### file: (\S[^\n]*)$", re.MULTILINE)


class DocumentError(ValueError):
    """A candidate text that is not a set of files the task lets the agent edit (one line)."""


def join(files: dict[str, str]) -> str:
    parts = []
    for path, text in sorted(files.items()):
        parts.append(f"{HEADER}{path}\n{text}" + ("" if text.endswith("\n") or not text else "\n"))
    return "".join(parts)


def split(document: str) -> dict[str, str]:
    """The files of a candidate text. Text before the first header is refused (it belongs to no file)."""
    heads = list(_HEADER_LINE.finditer(document))
    if not heads:
        raise DocumentError(f"no file in the candidate: each file starts with a line '{HEADER}<path>'")
    if document[:heads[0].start()].strip():
        raise DocumentError(f"text before the first '{HEADER}<path>' line belongs to no file")
    files: dict[str, str] = {}
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(document)
        path = m.group(1).rstrip()
        if path in files:
            raise DocumentError(f"{path} appears twice in the candidate")
        files[path] = document[m.end() + 1:end] if m.end() < len(document) else ""
    return files


def candidate_files(bundle: TaskBundle, document: str) -> dict[str, str]:
    """The task's editable files as this candidate has them. A file outside `files` (the guard, the
    metric's script, task.toml, anything else) is refused, naming it; an editable file the candidate
    leaves out keeps the task's version."""
    files = split(document)
    outside = sorted(p for p in files if not editable(bundle.spec, p))
    if outside:
        raise DocumentError(f"the candidate changes {', '.join(outside)}, outside the files the task lets "
                            f"the agent edit ({', '.join(bundle.spec.files)})")
    return {**bundle.starting_files(), **files}


def patch(bundle: TaskBundle, files: dict[str, str]) -> str:
    """A unified diff (a/ b/ prefixes: `git apply` or `patch -p1` in the task folder) from the task's
    editable files to these."""
    start = bundle.starting_files()
    out: list[str] = []
    for path in sorted(set(start) | set(files)):
        old, new = start.get(path, ""), files.get(path, "")
        if old == new:
            continue
        for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                         fromfile=f"a/{path}" if path in start else "/dev/null",
                                         tofile=f"b/{path}" if path in files else "/dev/null"):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_patch(bundle: TaskBundle, text: str) -> dict[str, str]:
    """The task's editable files with a unified diff (as `patch` writes it) applied. Refuses a diff that
    does not apply cleanly or touches a file the agent may not edit."""
    files = bundle.starting_files()
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            i += 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise DocumentError(f"patch line {i + 1}: '---' without '+++' after it")
        target = lines[i + 1][4:].strip().split("\t")[0]
        source = lines[i][4:].strip().split("\t")[0]
        path = (target if target != "/dev/null" else source).removeprefix("b/").removeprefix("a/")
        if not editable(bundle.spec, path):
            raise DocumentError(f"the patch changes {path}, outside the files the task lets the agent edit")
        old = files.get(path, "").splitlines(keepends=True)
        new: list[str] = []
        pos = 0
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise DocumentError(f"patch line {i + 1}: not a hunk header")
            start = max(int(m.group(1)) - 1, 0) if (m.group(2) or "1") != "0" else int(m.group(1))
            old_left, new_left = int(m.group(2) or "1"), int(m.group(4) or "1")
            if start < pos:
                raise DocumentError(f"patch line {i + 1}: hunks out of order in {path}")
            new.extend(old[pos:start])
            pos = start
            i += 1
            last = ""
            while i < len(lines) and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
                line = lines[i]
                if line.startswith("\\"):  # "no newline at end of file": of the line before it
                    if last in (" ", "+") and new and new[-1].endswith("\n"):
                        new[-1] = new[-1][:-1]
                    i += 1
                    continue
                last = line[:1]
                if last in (" ", "-"):
                    if pos >= len(old) or old[pos].rstrip("\n") != line[1:].rstrip("\n"):
                        raise DocumentError(f"patch line {i + 1}: does not apply to {path} (the task's file differs)")
                    if last == " ":
                        new.append(old[pos])
                        new_left -= 1
                    pos += 1
                    old_left -= 1
                elif last == "+":
                    new.append(line[1:])
                    new_left -= 1
                else:
                    raise DocumentError(f"patch line {i + 1}: a hunk of {path} ends early")
                i += 1
        new.extend(old[pos:])
        if target == "/dev/null":
            files.pop(path, None)
        else:
            files[path] = "".join(new)
    return files


def touched(bundle: TaskBundle, files: dict[str, str]) -> list[str]:
    start = bundle.starting_files()
    return sorted(p for p in set(start) | set(files) if start.get(p) != files.get(p))


def assert_editable(bundle: TaskBundle, paths: list[str]) -> None:
    bad = [p for p in paths if not editable(bundle.spec, p)]
    if bad:
        raise DocumentError(f"{', '.join(bad)}: outside the files the task lets the agent edit")
