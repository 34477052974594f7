"""How the evaluator's processes are started and cleaned up: each process's environment is built from
an allowlist (the judge's of the worker's, which holds the model's API key; the sandboxes' of the
judge's), the judge and the sandboxes are made non-dumpable (their children cannot read their /proc
environ, cmdline or memory), each dies with the process that started it, and scratch folders left by
a killed worker are removed when the next one starts. Torch-free: the worker and the evaluator's front
door import it; the mechanisms (libc, prctl) are kernels/evaluator/isolation.py's."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from kernels.evaluator import isolation

# --- the environment allowlists -------------------------------------------------------------------
# Variable names that never leave the worker, whatever their prefix says.
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE")
# What the judge needs from the worker's environment: the toolchain (CUDA, Triton, torch, the
# dynamic loader, the locale, FLA for the KDA baseline), which GPU it may use, and the evaluator's own
# switches (MARATHON_*).
JUDGE_ENV_NAMES = ("PATH", "LANG", "LANGUAGE", "TZ", "USER", "LOGNAME", "TMPDIR", "LD_LIBRARY_PATH",
                   "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CC", "CXX")
JUDGE_ENV_PREFIXES = ("LC_", "CUDA_", "TRITON_", "NVIDIA_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "FLA_", "MARATHON_")
# What a sandbox (the candidate's process, a file problem's) gets of the judge's: the toolchain and
# its GPU, names that begin so (PATH and LD_LIBRARY_PATH included); none of the judge's own switches.
SANDBOX_ENV_PREFIXES = ("CUDA_", "TRITON_", "NVIDIA_", "LD_LIBRARY_PATH", "PATH", "LANG", "LC_")
# Set by activities.evaluation.ncu_metrics when it runs the judge under Nsight Compute: a digest of each
# variable of the environment it started ncu with, so the judge can tell which ones ncu added or
# changed (profiler_env) without the values themselves travelling in another variable.
PROFILER_BASE_ENV = "MARATHON_NCU_BASE_ENV"

# Scratch folders of the evaluator's processes, under the temp dir; the owner's pid follows the prefix
# (kernels.evaluator.confinement.scratch_prefix) so that a starting worker can tell a dead owner's from a live one's.
SCRATCH_KINDS = ("marathon-judge", "marathon-eval", "marathon-fence-probe", "marathon-ncu")


def looks_secret(name: str) -> bool:
    return any(w in name.upper() for w in SECRET_WORDS)


SCRUB_MIN_CHARS = 8  # shorter values (1, C.UTF-8, a user name) are everywhere in ordinary text


def _scrubbed_values(env: dict[str, str]) -> list[tuple[str, str]]:
    """(value, name) pairs to take out of text leaving the evaluator: every value of a variable whose
    name looks secret, and every other value long enough to mean something that is not a path or a
    list of paths (those are in tracebacks everywhere, and not secrets), longest first."""
    out = []
    for name, value in env.items():
        value = value.strip()
        if len(value) < 4:
            continue
        if not looks_secret(name):
            parts = [p for p in value.split(os.pathsep) if p]
            if len(value) < SCRUB_MIN_CHARS or (parts and all(p.startswith(("/", "~")) for p in parts)):
                continue
            if value.replace(".", "").replace(",", "").isdigit():
                continue
        out.append((value, name))
    return sorted(out, key=lambda vn: -len(vn[0]))


# Characters a terminal or an editor obeys rather than shows: C0 and C1 controls (ESC starts the sequences
# that retitle, clear or rewrite a screen) but the newline and the tab, and the bidirectional overrides.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _shown(match: re.Match) -> str:
    c = ord(match.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def scrub(obj, env: dict[str, str] | None = None):
    """`obj` (a string, or lists and dicts of them, as a verdict's dump) with the values of this
    process's environment (the worker's: the model's API key among them) replaced by their names, and
    control characters shown as escapes (`\\x1b`; a carriage return as a newline).
    A last line behind the fences: no code of a candidate's or a problem's can read these values, and
    none of them may reach a verdict, a log or the workflow's history even if one did; nor may text
    they wrote drive the terminal, the notebook or the report of the person who reads it."""
    pairs = _scrubbed_values(dict(os.environ if env is None else env))

    def text(s: str) -> str:
        for value, name in pairs:
            if value in s:
                s = s.replace(value, f"[${name}]")
        return _CONTROL.sub(_shown, s.replace("\r\n", "\n").replace("\r", "\n"))

    def walk(o):
        if isinstance(o, str):
            return text(o)
        if isinstance(o, list):
            return [walk(x) for x in o]
        if isinstance(o, tuple):
            return tuple(walk(x) for x in o)
        if isinstance(o, dict):
            return {walk(k): walk(v) for k, v in o.items()}
        return o
    return walk(obj)


def env_digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def judge_env(scratch: str | Path, project_root: str | Path, source: dict[str, str] | None = None) -> dict[str, str]:
    """The judge process's whole environment: the allowlisted variables of `source` (the worker's
    environment), HOME in the judge's scratch folder, the project on PYTHONPATH. Triton's cache keeps
    the worker's location (its default lives under HOME), so baselines compiled and tuned by one judge
    serve the next."""
    source = dict(os.environ if source is None else source)
    env = {k: v for k, v in source.items()
           if (k in JUDGE_ENV_NAMES or k.startswith(JUDGE_ENV_PREFIXES)) and not looks_secret(k)}
    home = source.get("HOME") or str(Path.home())
    env.setdefault("TRITON_CACHE_DIR", str(Path(home) / ".triton" / "cache"))
    env["HOME"] = str(scratch)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(project_root), source.get("PYTHONPATH")]))
    env["PYTHONNOUSERSITE"] = "1"
    return env


# What the sandboxes' own code imports from outside the standard library (kernels/evaluator/protocol.py,
# the harness, the problem's runtime), wherever it was installed
SANDBOX_PACKAGES = ("torch", "triton", "numpy", "pydantic", "pydantic_core", "typing_extensions", "annotated_types",
                    "typing_inspection")


def import_roots(packages: tuple[str, ...] = SANDBOX_PACKAGES) -> list[str]:
    """The entries of this interpreter's path that a sandbox needs: every site-packages folder, and the
    entry each of `packages` was found under (an offline bundle installed into a folder of its own, on
    PYTHONPATH, is no site-packages). Nothing else of the judge's path."""
    roots = [p for p in sys.path if p and "site-packages" in p]
    entries = {os.path.abspath(p): p for p in sys.path if p}
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            continue
        origin = Path(spec.origin)
        folder = origin.parent.parent if spec.submodule_search_locations else origin.parent
        entry = entries.get(os.path.abspath(folder))
        if entry is not None and entry not in roots:
            roots.append(entry)
    return roots


def sandbox_env(device: str, home: str | Path, token: str, project_root: str | Path, triton_cache: str,
                source: dict[str, str] | None = None) -> dict[str, str]:
    """A sandbox's whole environment: the allowlisted variables of `source` (the judge's environment),
    its folder as HOME and TMPDIR, the project and the folders its imports come from on PYTHONPATH
    (import_roots: nothing else of the judge's path), Triton's shared cache, the sandbox's token, and under Nsight Compute
    what the profiler added (profiler_env)."""
    source = dict(os.environ if source is None else source)
    env = {k: v for k, v in source.items() if k.startswith(SANDBOX_ENV_PREFIXES) and not looks_secret(k)}
    env.update({
        "HOME": str(home), "TMPDIR": str(home), "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join([str(project_root)] + import_roots()),
        "TRITON_CACHE_DIR": triton_cache,
        "OMP_NUM_THREADS": source.get("OMP_NUM_THREADS", "2"),
        isolation.SANDBOX_TOKEN_VAR: token,  # marks every process of this sandbox, for the watchdog and the cleanup
    })
    env.update(profiler_env(source))
    env.pop("TRITON_INTERPRET", None)
    # a candidate autotunes afresh: its cache directory is shared with other candidates, and a cached
    # pick from one of them must not steer another (the judge's own baselines do cache, elsewhere)
    env.pop("TRITON_CACHE_AUTOTUNING", None)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:  # one GPU, the judge's: work on another is not waited for by the clock's synchronisation
        env["CUDA_VISIBLE_DEVICES"] = judge_gpu(source)
    return env


def judge_gpu(source: dict[str, str]) -> str:
    """The GPU the judge uses (its current device, the first it sees), as CUDA_VISIBLE_DEVICES names it."""
    listed = source.get("CUDA_VISIBLE_DEVICES")
    return "0" if listed is None else listed.split(",")[0].strip()


def profiler_env(source: dict[str, str] | None = None) -> dict[str, str]:
    """The variables Nsight Compute put into the judge's environment (its injection library and how to
    reach the profiler), for the sandbox: without them the injected library that follows child
    processes crashed the sandbox (SIGSEGV, on the H200 with every fence up and with each one down).
    Only under ncu_metrics; never a variable whose name looks like a secret, never ours (MARATHON_*,
    PROFILER_BASE_ENV included)."""
    source = dict(os.environ if source is None else source)
    base = source.get(PROFILER_BASE_ENV)
    if not base:
        return {}
    try:
        digests = json.loads(base)
    except ValueError:
        return {}
    return {k: v for k, v in source.items()
            if digests.get(k) != env_digest(v) and not k.startswith("MARATHON_") and not looks_secret(k)}


# --- process hygiene ------------------------------------------------------------------------------
def make_non_dumpable() -> bool:
    """PR_SET_DUMPABLE 0 for this process: its /proc files become root's and ptrace-style access
    (environ, cmdline, mem, attaching) needs CAP_SYS_PTRACE, which the candidate does not hold.
    No core dumps either. Linux only; False where it did not take."""
    try:
        return isolation.libc().prctl(isolation.PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(sig: int = signal.SIGKILL):
    """A preexec_fn: the child gets `sig` when the thread that started it ends (the evaluating thread
    blocks on the child, so that is when the worker dies). If the parent is already gone by the time
    the child asks, the child kills itself at once."""
    parent = os.getpid()
    isolation.libc()  # loaded before fork: the child must not dlopen

    def apply() -> None:
        isolation.set_parent_death_signal(sig)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)
    return apply


def scratch_prefix(kind: str) -> str:
    """tempfile prefix for a scratch folder of `kind` (one of SCRATCH_KINDS) owned by this process."""
    return f"{kind}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    """Running (a zombie is dead: a killed judge whose new parent does not reap it stays one)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] != b"Z"
    except (OSError, ValueError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not os.path.isdir("/proc")  # no /proc entry on a system with /proc: gone


def remove_stale_scratch(root: str | Path | None = None) -> list[Path]:
    """Removes the evaluator's scratch folders under `root` (the temp dir) whose owner process is
    gone: what a SIGKILLed worker, judge or candidate left behind. A live owner's folder, and anything
    not named like ours, stays. Returns what was removed."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for path in entries:
        owner = _owner(path.name)
        if owner is None or not path.is_dir() or path.is_symlink() or _alive(owner):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed


def _owner(name: str) -> int | None:
    """The owner pid in a scratch folder's name, or None when the name is not one of ours."""
    for kind in SCRATCH_KINDS:
        head = kind + "-"
        if name.startswith(head):
            pid, sep, _ = name[len(head):].partition("-")
            if sep and pid.isdigit() and int(pid) > 0:
                return int(pid)
    return None
