"""How a figure reads, in every output (the report's pages, the CLI's tables and lines): times in plain
units (µs, ms, s) and speedups to three significant figures, never in scientific notation. Light to
import: `marathon eval` prints with it."""
from __future__ import annotations

import math

from kernels.labels import SIG, sig, speedup  # noqa: F401  (the figures' one form, shared with the judge)

CPU_TIMES = ("every time here is the Triton interpreter's on a CPU: it says nothing about speed on a GPU, and a "
             "speedup (a baseline's CPU time over the kernel's) is noise")


def duration_us(us: float | None) -> str:
    """A time given in microseconds, in the unit that reads best: `812 ns`, `184 µs`, `23.9 ms`, `1.34 s`."""
    if us is None:
        return ""
    if not math.isfinite(us):
        return sig(us)
    a = abs(float(sig(us)))  # rounded first: 999.7 µs reads 1 ms, not 1000 µs
    if a >= 1e6:
        return f"{sig(us / 1e6)} s"
    if a >= 1e3:
        return f"{sig(us / 1e3)} ms"
    if a >= 1 or a == 0:
        return f"{sig(us)} µs"
    return f"{sig(us * 1e3)} ns"


def worker_name(identity: str, device: str = "", gpu: str = "") -> str:
    """An evaluation worker by its host and device, not by the worker identity Temporal records
    ("pid@host", or "pid@host/gpuN" for a worker serving one GPU): "host, GPU 3 (NVIDIA H200)",
    "host, CPU". `device` and `gpu` are its verdict's (cpu, cuda or cuda:N; the GPU's name)."""
    where = identity.split("@", 1)[1] if "@" in identity else identity
    host, _, pinned = where.partition("/")
    if pinned.startswith("gpu"):
        what = f"GPU {pinned[3:]}"
    elif device.startswith("cuda"):
        what = f"GPU {device.partition(':')[2]}".rstrip() if ":" in device else "GPU"
    elif device == "cpu":
        what = "CPU"
    else:
        what = pinned or device or "?"
    if gpu and what.startswith("GPU"):
        what += f" ({gpu})"
    return f"{host or '?'}, {what}"
