"""Text helpers shared by the prompt, the summarizers and the workflow's ledger. Pure."""
from __future__ import annotations

from typing import Any


def one_line(text: Any, limit: int) -> str:
    """`text` on one line (runs of whitespace become one space), cut to `limit` characters with an
    ellipsis where it is longer; None reads as empty."""
    text = " ".join(("" if text is None else str(text)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def speedups_text(speedups: dict[str, float]) -> str:
    """Speedups by baseline, as "1.23x vs torch, 0.98x vs fla", baselines in name order."""
    return ", ".join(f"{v:.3g}x vs {k}" for k, v in sorted(speedups.items()))
