"""The one schema of a committed measurement (bench/results/<hardware>/*.json).

A record is what a maintainer needs to trust and repeat a figure: the verdict exactly as
`marathon eval --json` prints it (kernels/evaluator/verdict.py), or, for a measurement that is not one
evaluation (a timing study, a tuner run's report, device peaks), its figures; plus the host it ran
on, the command, the date and the commit. A field nobody recorded is null, never a guess.
`raw` names the file the figures were first written to and the commit that added it, so the
original stays one `git show` away after it leaves the tree."""
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from kernels.evaluator.verdict import Verdict


class Host(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu: str | None  # e.g. "NVIDIA H200"; "cpu" for a CPU-only measurement
    driver: str | None
    torch: str | None
    triton: str | None
    python: str | None
    # versions of the libraries the baselines come from (e.g. "fla"), or null where unrecorded
    baseline_libraries: dict[str, str | None]


class RawFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str  # where the figures were first committed
    commit: str | None  # the commit that added that file (`git show <commit>:<path>`)


class ResultRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    measurement: str  # what was measured, in one line
    host: Host
    command: str | None
    date: str | None  # UTC, ISO 8601, when it ran
    commit: str | None  # the commit whose code was measured
    verdict: Verdict | None = None
    figures: dict[str, Any] | None = None  # what a measurement that is not a verdict produced
    raw: RawFile | None = None

    @model_validator(mode="after")
    def _has_figures(self) -> "ResultRecord":
        if self.verdict is None and not self.figures:
            raise ValueError("a result record needs a verdict or figures")
        return self
