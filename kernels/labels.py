"""How a shape, a configuration or a speedup reads in one line: `B=1,H=16,S=4096`, `BLOCK_S=32,
num_warps=4`, `0.00319x`. One place for the `k=v` form and the significant figures that the judge's
reasons, the notebook, the tool results, the memory, the tables and the report share. Pure: the workflow and every process import it."""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

SIG = 3  # significant figures of a speedup or a time


def kv(mapping: Mapping[str, Any] | None, sep: str = ",", value: Callable[[Any], str] = str) -> str:
    return sep.join(f"{k}={value(v)}" for k, v in (mapping or {}).items())


def shape_label(shape: Mapping[str, Any]) -> str:
    return kv(shape, ",")


def config_label(config: Mapping[str, Any] | None) -> str:
    return kv(config, ", ")


def sig(x: float, digits: int = SIG) -> str:
    """`x` to `digits` significant figures in positional notation: 0.000912, 0.0027, 1.23, 12.3, 1234."""
    if x is None:
        return ""
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    text = f"{round(x, decimals):.{decimals}f}"
    if "." in text:  # what rounding filled with zeros is not a measured digit
        text = text.rstrip("0").rstrip(".")
    return text


def speedup(x: float | None) -> str:
    """A speedup: `0.00271x`, `1.23x`, `123x`; empty for none."""
    return "" if x is None else sig(x) + "x"
