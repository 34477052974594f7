"""How a shape or a configuration reads in one line: `B=1,H=16,S=4096`, `BLOCK_S=32, num_warps=4`. One
place for the `k=v` form the judge's reasons, the notebook, the tool results, the memory, the tables and
the report share. Pure: the workflow and every process import it."""
from __future__ import annotations

from typing import Any, Callable, Mapping


def kv(mapping: Mapping[str, Any] | None, sep: str = ",", value: Callable[[Any], str] = str) -> str:
    return sep.join(f"{k}={value(v)}" for k, v in (mapping or {}).items())


def shape_label(shape: Mapping[str, Any]) -> str:
    return kv(shape, ",")


def config_label(config: Mapping[str, Any] | None) -> str:
    return kv(config, ", ")
