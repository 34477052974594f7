"""A task's regular expressions (guard.expect, metric.read's `regex:`, a tunable's pattern), matched in
linear time. They come from the task and run in the worker's own process, unfenced, over output the
task's commands choose (up to 256 KB): a backtracking engine (Python's `re`) lets a pattern such as
`(a+)+b` take time exponential in that output, stalling the worker (its activities share one process
and one GIL). RE2 (PyPI google-re2) takes time linear in the text, whatever the pattern; in return it
refuses backreferences (`\\1`), lookaround (`(?=`, `(?<=`, `(?!`), possessive and atomic forms, and
repetition counts above 1000, and its `\\w`, `\\d`, `\\s` are ASCII. A pattern it cannot take is
refused when the task is read, naming the field (`compile` raises PatternError with one line).

Our own patterns over a task's output (METRIC lines) go through here too."""
from __future__ import annotations

import functools

import re2

MULTILINE = "(?m)"  # RE2's flag syntax: ^ and $ at each line's start and end


class PatternError(ValueError):
    """A pattern RE2 cannot take: one line."""


def _options() -> "re2.Options":
    options = re2.Options()
    options.log_errors = False  # RE2 would also print the refusal on stderr
    return options


_OPTIONS = _options()


@functools.lru_cache(maxsize=512)
def compile(pattern: str, flags: str = "") -> "re2._Regexp":  # noqa: A001 (as re.compile)
    """The pattern compiled by RE2; `flags` is a prefix such as MULTILINE. Raises PatternError."""
    try:
        return re2.compile(flags + pattern, _OPTIONS)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"{pattern!r} is not a regular expression RE2 takes ({why}); RE2 matches in linear time "
                           "and has no backreferences, lookaround or possessive forms") from None


def search(pattern: str, text: str, flags: str = ""):
    """The first match (a match object as `re`'s: group, groups, start, end), or None."""
    return compile(pattern, flags).search(text)
