"""The tunables convention. A kernel module may declare, at top level, two literal dicts:

    TUNABLES = {"BLOCK_S": (16, 32, 64), "num_warps": (4, 8)}   # every value each knob may take
    CONFIG = {"BLOCK_S": 32, "num_warps": 4}                    # the values this source uses

and its launcher reads CONFIG. A tuner makes a new candidate by rewriting the CONFIG literal in the
source (`with_config`), so every configuration it tries is a complete, self-contained source."""
from __future__ import annotations

import ast
import itertools
from typing import Any


class TunablesError(ValueError):
    pass


def _literal_assign(tree: ast.Module, name: str) -> ast.Assign | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
    return None


def read_tunables(source: str) -> tuple[dict[str, tuple], dict[str, Any]] | None:
    """(TUNABLES, CONFIG) declared by a source, or None when it declares none."""
    tree = ast.parse(source)
    tun, cfg = _literal_assign(tree, "TUNABLES"), _literal_assign(tree, "CONFIG")
    if tun is None or cfg is None:
        return None
    try:
        tunables = {k: tuple(v) for k, v in ast.literal_eval(tun.value).items()}
        config = dict(ast.literal_eval(cfg.value))
    except (ValueError, TypeError) as exc:
        raise TunablesError(f"TUNABLES and CONFIG must be literal dicts: {exc}") from None
    missing = set(tunables) - set(config)
    if missing:
        raise TunablesError(f"CONFIG lacks {', '.join(sorted(missing))}")
    return tunables, config


def with_config(source: str, config: dict[str, Any]) -> str:
    """The same source with its CONFIG literal replaced by `config`."""
    tree = ast.parse(source)
    node = _literal_assign(tree, "CONFIG")
    if node is None:
        raise TunablesError("the source declares no CONFIG")
    lines = source.splitlines(keepends=True)
    start, end = node.lineno - 1, node.end_lineno
    body = "CONFIG = {" + ", ".join(f"{k!r}: {v!r}" for k, v in config.items()) + "}\n"
    return "".join(lines[:start]) + body + "".join(lines[end:])


def all_configs(tunables: dict[str, tuple]) -> list[dict[str, Any]]:
    keys = list(tunables)
    return [dict(zip(keys, values)) for values in itertools.product(*(tunables[k] for k in keys))]
