"""The `MARATHON_*` environment switches, each named once: its type, default, bound and meaning.

`settings()` reads them from the environment each time it is called, so a reader reads them where it
uses them (a test that sets one for a subprocess, or the judge's fence self-test that turns a fence off
in its own process, is seen by the next read). A value that does not parse or is out of bounds raises
SettingsError, whose text is one line naming the variable; the entry points (the CLI, worker.py, the
judge) call `exit_on_bad_settings()` first, so a bad value is that line and exit 2, never a traceback.
An empty value counts as unset.

Here, in kernels/, because it is the package every process may import: the CLI and the workers, the
judge, and the sandboxed processes, whose fences let them read the project's `kernels` package and
nothing else of it. Torch-free and Temporal-free: pydantic only.

The table in docs/settings.md is `python -m kernels.settings` (tests/kernels/test_settings.py checks they agree)."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

PREFIX = "MARATHON_"
GiB = 2**30


class SettingsError(ValueError):
    """A switch with a bad value; str() is one line naming the variable."""


class Settings(BaseModel):
    """Field `sandbox_disk` is the variable MARATHON_SANDBOX_DISK, and so on. Each description is the table's meaning column."""
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # --- workers and the CLI ----------------------------------------------------------------------
    artifacts: Path | None = Field(None, description="the artifact store's folder (`worker.py --artifacts` wins); "
                                                     "default ~/.local/state/kernel-marathon/artifacts")
    artifacts_quota_bytes: int | None = Field(None, ge=1, le=2**50, description="a cap on the artifact store's "
                                              "size, in bytes (tests of a full store); default none")
    baseline_ttl_s: float = Field(1800.0, ge=0, le=7 * 86400, description="how long a GPU worker reuses a "
                                  "baseline timing it measured; 0 times every baseline in every evaluation")
    warm_judges: bool = Field(True, description="a worker serving evaluations starts the next judge ahead of "
                                                "need; 0: each judge starts on demand")
    ncu: str | None = Field(None, description="the Nsight Compute CLI for profile_kernel's metrics; default "
                                              "`ncu` on PATH, else the newest under /opt/nvidia/nsight-compute")
    task_cache: Path | None = Field(None, description="where a worker keeps each task's prepared folder; "
                                                      "default <temp dir>/marathon-task-cache")
    model_keys: str | None = Field(None, max_length=8192, description="where this worker may send a model key "
                                   "besides OpenAI's key to api.openai.com: `VAR=URL VAR2=URL2` (space- or "
                                   "`;`-separated; `http://HOST:*` allows any port of HOST); a run's input cannot "
                                   "choose where a worker's secrets go")
    temporal_tls_ca: Path | None = Field(None, description="TLS to the Temporal server: the CA certificate (PEM) "
                                                           "that signed the server's; default the system's roots")
    temporal_tls_cert: Path | None = Field(None, description="mTLS: this client's certificate (PEM), with "
                                                             "MARATHON_TEMPORAL_TLS_KEY")
    temporal_tls_key: Path | None = Field(None, description="mTLS: this client's private key (PEM), with "
                                                            "MARATHON_TEMPORAL_TLS_CERT")
    temporal_api_key_env: str | None = Field(None, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                             description="the name of the variable that holds an API key for the "
                                                         "Temporal server (Temporal Cloud); the key travels over "
                                                         "TLS only")
    model_server_verbosity: int = Field(3, ge=0, le=10, description="llama.cpp's log verbosity in "
                                        "serving/model_server.py (the real model server of the tests)")

    # --- the judge --------------------------------------------------------------------------------
    triton_cache: Path | None = Field(None, description="Triton's cache shared by the candidates of one "
                                                        "machine; default <temp dir>/marathon-triton-cache")
    gpu_quiet_wait_s: float = Field(120.0, ge=0, le=86400, description="the longest wait for other processes "
                                    "to leave the GPU before timing anyway (the verdict says so)")
    problem_timeout_s: float = Field(300.0, gt=0, le=86400, description="a file problem's own code, all told, "
                                     "per evaluation (its module, inputs, references, baselines)")
    keep_output_bytes: int | None = Field(None, ge=0, le=2**44, description="tests only: bytes of timed calls' "
                                          "outputs the candidate's process keeps for the re-check (past them it "
                                          "keeps a random sample); default a share of the GPU's memory, all on a CPU")
    test_device_profile: str | None = Field(None, description="tests only: `name:bytes_per_s:flops_per_s`, a "
                                            "roofline the judge applies on any device (the floor check)")
    unsafe_skip_policy: bool = Field(False, description="tests only: skip the static policy, to test the "
                                                        "run-time defences behind it (the verdict is flagged)")

    # --- the sandboxes (the candidate's process and a file problem's) --------------------------------
    sandbox_seccomp: bool = Field(True, description="the seccomp filter (no socket() at all, socketpair for streams only, no fork, "
                                                    "exec only for the compilers)")
    sandbox_landlock: bool = Field(True, description="Landlock: writes only under the scratch folder and "
                                                     "Triton's cache, no TCP")
    sandbox_landlock_reads: bool = Field(True, description="Landlock's read allowlist (with "
                                                           "MARATHON_SANDBOX_LANDLOCK)")
    sandbox_landlock_exec: bool = Field(True, description="Landlock's program allowlist (with "
                                                          "MARATHON_SANDBOX_LANDLOCK)")
    sandbox_pidns: bool = Field(True, description="a PID namespace per sandbox and per task command: "
                                                  "whatever it starts ends with it")
    sandbox_subreaper: bool = Field(True, description="the judge (a task command's launcher) adopts what its "
                                                      "sandboxes leave behind (a detached process whose parent "
                                                      "died) and ends it")
    sandbox_netns: bool = Field(True, description="a network namespace per sandbox: no interface but a "
                                                  "down loopback")
    sandbox_drop_capabilities: bool = Field(True, description="the judge and the sandboxes give up root's "
                                                              "capabilities they do not need")
    sandbox_self_test: bool = Field(True, description="on CUDA, once per machine: a probe kernel inside the "
                                                      "fences; a fence that breaks it stays off there")
    sandbox_seal: Literal["on", "off", "report"] = Field("on", description="the audit-hook seal before "
                                                         "candidate code: on, off (the fences alone), or report "
                                                         "(flags instead of kills)")
    sandbox_max_processes: int = Field(16, ge=1, le=4096, description="processes a sandbox may have at "
                                       "once (ptxas and the C compiler while compiling)")
    sandbox_disk: int = Field(4 * GiB, ge=2**20, le=2**44, description="bytes a sandbox may write under "
                              "its scratch folder (a task command: add to its copy of the task)")
    sandbox_memory: int | None = Field(None, ge=2**26, le=2**44, description="bytes of host memory a "
                                       "sandbox may use; default 12 GiB on the CPU, 48 GiB on a GPU")
    sandbox_address_space: int = Field(12 * GiB, ge=2**28, le=2**46, description="the candidate's "
                                       "address-space limit on the CPU (CUDA maps more than it uses)")
    sandbox_gpu_fraction: float = Field(0.8, gt=0, le=1, description="the share of GPU memory the "
                                        "candidate may allocate; the judge keeps the rest")

    # --- benchmarks and tests ---------------------------------------------------------------------
    commit: str | None = Field(None, max_length=64, description="the commit a benchmark record names, "
                                                                "for a copy of the tree without .git")
    real_model: bool = Field(False, description="tests: the real model server is required (CI), not "
                                                "skipped where it is not installed")

    @field_validator("sandbox_seal", mode="before")
    @classmethod
    def _seal_words(cls, value):
        if isinstance(value, str) and value.lower() in ("1", "true", "yes"):
            return "on"
        if isinstance(value, str) and value.lower() in ("0", "false", "no"):
            return "off"
        return value.lower() if isinstance(value, str) else value

    @field_validator("test_device_profile")
    @classmethod
    def _device_profile(cls, value: str | None) -> str | None:
        if value is not None:
            parts = value.split(":")
            if len(parts) != 3 or not parts[0]:
                raise ValueError("expected name:bytes_per_s:flops_per_s")
            try:
                if min(float(parts[1]), float(parts[2])) <= 0:
                    raise ValueError
            except ValueError:
                raise ValueError("expected name:bytes_per_s:flops_per_s with positive numbers") from None
        return value

    def sandbox_memory_bytes(self, device: str) -> int:
        return self.sandbox_memory or (12 * GiB if device == "cpu" else 48 * GiB)

    def triton_cache_dir(self) -> Path:
        import tempfile
        return self.triton_cache or Path(tempfile.gettempdir()) / "marathon-triton-cache"


def variable(field: str) -> str:
    """The environment variable of a field: sandbox_disk -> MARATHON_SANDBOX_DISK."""
    return PREFIX + field.upper()


# The sandbox fences by their names in an assignment (kernels/evaluator/fences.py) and the switch of each.
FENCE_FIELDS = {"seccomp": "sandbox_seccomp", "landlock": "sandbox_landlock", "landlock_reads": "sandbox_landlock_reads",
                "landlock_exec": "sandbox_landlock_exec", "pid_namespace": "sandbox_pidns", "netns": "sandbox_netns",
                "capabilities": "sandbox_drop_capabilities"}
FENCE_SWITCHES = {name: variable(f) for name, f in FENCE_FIELDS.items()}

# MARATHON_* names that are not switches: set by the product for its own processes, or canaries the fence
# drills plant; never set by hand. Listed so that every MARATHON_* name is declared here (tests/kernels/test_settings.py).
INTERNAL = {
    "MARATHON_SANDBOX": "set by the judge: a token that marks every process of one sandbox (the watchdog, the cleanup)",
    "MARATHON_NCU_BASE_ENV": "set for a judge run under Nsight Compute: digests of the variables it started with",
    "MARATHON_GPU_CHILD": "set by `worker.py --gpus` in each per-GPU child: it serves its one GPU and starts none",
    "MARATHON_TEST_SECRET": "a canary key the fence drills put in the worker's environment (tests, bench)",
    "MARATHON_TEST_ECHO": "a canary value the fence drills expect scrubbed from verdicts (tests, bench)",
    "MARATHON_GPU_SETUP": "bench/gpu_measurements.sh: a command run first on a fresh GPU host",
    "MARATHON_STATE_ARCHIVE": "bench/gpu_measurements.sh: the state folder a tuner-kda-start packed",
    "MARATHON_TEST_KEY": "tests: the variable that holds the scripted model's key (a run's api_key_env)",
}


def settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The switches as the environment (os.environ by default) sets them now."""
    env = os.environ if environ is None else environ
    raw = {}
    for name in Settings.model_fields:
        value = env.get(variable(name), "").strip()
        if value:
            raw[name] = value
    try:
        return Settings(**raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first.get("loc") else ""
        shown = raw.get(field, "")
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise SettingsError(f"{variable(field)}={shown!r}: {first['msg']}") from None


def exit_on_bad_settings(program: str) -> Settings:
    """settings(), or the one line naming the bad variable on stderr and exit 2."""
    try:
        return settings()
    except SettingsError as exc:
        print(f"{program}: bad environment: {exc}", file=sys.stderr)
        sys.exit(2)


def markdown_table() -> str:
    """docs/settings.md: every switch with its type, default and bounds, then the internal names."""
    lines = ["# Environment switches", "",
             "Every `MARATHON_*` variable the product reads, from `kernels/settings.py` (regenerate this file with",
             "`python -m kernels.settings > docs/settings.md`). An empty value counts as unset; a bad value",
             "stops the CLI, a worker or the judge with one line naming the variable (exit 2).", "",
             "| variable | type | default | bounds | meaning |", "|---|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        kind = _type_name(field.annotation)
        default = "unset" if field.default is None else _shown(field.default)
        bounds = []
        for m in field.metadata:
            for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("max_length", "length <=")):
                if getattr(m, attr, None) is not None:
                    bounds.append(f"{sign} {_shown(getattr(m, attr))}")
        lines.append(f"| `{variable(name)}` | {kind} | {default} | {', '.join(bounds) or '-'} | {field.description} |")
    lines += ["", "Set by the product for its own processes, or test canaries; never set by hand:", "",
              "| variable | what it is |", "|---|---|"]
    lines += [f"| `{name}` | {what} |" for name, what in INTERNAL.items()]
    return "\n".join(lines) + "\n"


def _type_name(annotation) -> str:
    text = str(annotation).replace("typing.", "").replace("pathlib.", "").replace("<class '", "").replace("'>", "")
    if text == "bool":
        return "on/off (1/0)"
    if text.startswith("Literal["):
        return " \\| ".join(a.strip().strip("'") for a in text[len("Literal["):-1].split(","))
    return {"Path | None": "path", "str | None": "text", "int | None": "integer", "int": "integer",
            "float": "number"}.get(text, text)


def _shown(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int) and value >= 2**20 and value % 2**20 == 0:
        for unit, size in (("TiB", 2**40), ("GiB", GiB), ("MiB", 2**20)):
            if value % size == 0:
                return f"{value // size} {unit}"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
