"""A task's knobs for the model-free tuner, in the shape kernels/problems/tunables.py gives a kernel's:
(TUNABLES, CONFIG) read from a candidate, and the same candidate with another CONFIG written in.
A task declares its knobs in task.toml (`[tunables.NAME]`: a file, a pattern with one group, the
values); a candidate's CONFIG is what its files hold in those groups."""
from __future__ import annotations

from typing import Any

from tasks import document as doc
from tasks import patterns
from tasks.spec import TaskBundle


class TaskTunablesError(ValueError):
    pass


def read_tunables(bundle: TaskBundle, document: str) -> tuple[dict[str, tuple], dict[str, Any]] | None:
    """(TUNABLES, CONFIG) of this candidate, or None when the task declares no knobs."""
    if not bundle.spec.tunables:
        return None
    files = doc.candidate_files(bundle, document)
    tunables, config = {}, {}
    for name, t in bundle.spec.tunables.items():
        m = patterns.search(t.pattern, files.get(t.file, ""))
        if m is None:
            raise TaskTunablesError(f"knob {name}: {t.pattern!r} matches nothing in {t.file}")
        tunables[name] = tuple(t.values)
        config[name] = m.group(1)
    return tunables, config


def with_config(bundle: TaskBundle, document: str, config: dict[str, Any]) -> str:
    """The candidate with each knob's group replaced by its value in `config`."""
    files = doc.candidate_files(bundle, document)
    for name, value in config.items():
        t = bundle.spec.tunables.get(name)
        if t is None:
            raise TaskTunablesError(f"the task has no knob {name}")
        text = files[t.file]
        m = patterns.search(t.pattern, text)
        if m is None:
            raise TaskTunablesError(f"knob {name}: {t.pattern!r} matches nothing in {t.file}")
        files[t.file] = text[:m.start(1)] + str(value) + text[m.end(1):]
    return doc.join(files)
