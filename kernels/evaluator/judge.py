"""The judge process: generates inputs, computes the reference, runs and times the baselines, and
decides the verdict from what the sandbox reports on its structured channel and from the outputs it
writes. Trusted code only; the candidate runs in the sandbox (kernels.evaluator.candidate_process), never here.

    python -m kernels.evaluator.judge REQUEST.json VERDICT.json"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import math
import os
import platform
import random
import secrets
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch
import triton

from kernels.evaluator import confinement, gpu_quiet, isolation, protocol, tensor_file, timing
from kernels.evaluator.protocol import (ArmedReply, ArmRequest, BaselineNamesReply, BaselineNamesRequest, BaselinesReply,
                                        BaselinesRequest, CalledReply, CallRequest, CandidateReadyReply, ErrorReply,
                                        FactsReply, FactsRequest, FencedReply, FiredReply, FireRequest, ForgetRequest,
                                        ForgotReply, MinBytesReply, MinBytesRequest, PingRequest, PongReply,
                                        ProblemErrorReply, ProblemReadyReply, ReferencedReply, ReferenceRequest,
                                        RunsReply, RunsRequest, SavedReply, SaveTimedRequest, SealRecord, SealedReply,
                                        SpecReply, SpecRequest, TimedReply, TimeRequest)
from kernels.evaluator.timing import compare, reference_defect, time_baseline
from kernels.evaluator.seal import SEAL_EXIT
from kernels.evaluator.hostinfo import nvidia_driver
from kernels.evaluator.evaluate import (PROJECT_ROOT, EvalRequest, EvaluatorError, ProblemCheck, ProblemReport,
                                        source_sha256)
from kernels.evaluator.policy import check_source, module_violation
from kernels.problems.kernelbench_facts import NOISE_REL
from kernels.problems.kernelbench_runtime import WIDEN_FACTOR
from kernels.problems.kernelbench import FileFacts, ReferenceCall, check_given, full_shape, statement
from kernels.problems.spec import PROBLEM_NAMES, ProblemSpec, ShapeError, get_problem
from kernels.evaluator.roofline import DeviceProfile, profile_for_gpu
from kernels.labels import shape_label, speedup
from kernels.evaluator.verdict import Gpu, KnownBaseline, ShapeResult, Timing, Verdict, device_label
from kernels.settings import FENCE_FIELDS, FENCE_SWITCHES, exit_on_bad_settings, settings, variable

SUSPECT_SPEEDUP = 10.0  # over the strongest baseline: flagged, not rejected
FLOOR_MARGIN = 0.9  # a median under 90% of the roofline floor is physically implausible
# A baseline is only sanity-checked (a broken one is far off, rel ~1): it may round where candidates
# may not (the MLA torch baseline casts the softmax to fp16 on the CPU: rel up to 1.5e-3 against a
# 1e-3 limit on 14 of 400 seeds), and dropping it for that made evaluations flaky.
BASELINE_TOLERANCE_FACTOR = 4.0
LOG_TAIL_CHARS = 4000
# bytes an output's file may hold beyond its tensor's: the header line (tensor_file.MAX_HEADER) and
# the file system's rounding of the blocks it is charged for, generously
OUTPUT_FRAMING = 2**20
POLL_S = 0.25  # how often the judge looks at the sandbox's processes, memory and disk while it waits
# Bytes a float output must be off by, relative to max|ref|, for two runs of the same inputs with
# different fills of fresh memory to count as "depends on uninitialised memory" rather than as
# run-to-run noise (atomics): far above rounding, far below what poison (NaN, ~6e4, ~1e36) gives.
REPRODUCIBLE_FRAC = 1e-3
# what an output may be: real values (a problem's floating output comes in the inputs' dtype)
JUDGED_OUTPUT_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16,
                                  torch.int32, torch.int64, torch.uint8, torch.bool})
WIDENED_LOOSENESS = 10.0  # its tolerance, in multiples of the problem's
INTEGER_MISMATCH_DIVISOR = 1000  # an integer output may differ from the reference in 1 value of this many (ties)
FILL_A, FILL_B = 0xFF, 0x7B  # 0xFF is NaN in fp16/bf16/fp32; 0x7B.. is a large finite number in each
R = TypeVar("R", bound=protocol.Message)


class Outcome(Exception):
    """Ends judging early with a status and a reason."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Overstepped(Outcome):
    """The watchdog's finding: the sandbox's tree used more processes, memory or disk than it may. Our
    own code in it has a small fixed footprint, so it is what the untrusted code did, whenever it is seen."""


def triton_cache_dir() -> str:
    path = settings().triton_cache_dir()
    os.makedirs(path, exist_ok=True)
    return str(path)


def _limits(device: str):
    """Runs in the sandbox child before exec: die with the judge, no core dumps, bounded (CPU) address
    space (the file-size limit, which depends on the evaluation's shapes, the process sets itself on
    its assignment, before any candidate code). The other fences (network namespace, Landlock, seccomp) the sandbox puts up
    itself, after CUDA and Triton have started: CUDA's initialisation failed under them on the H200
    machines (error 304) when they came first."""
    import resource
    isolation.libc()  # load libc here: the child must not dlopen after fork
    address_space = settings().sandbox_address_space  # read here: the child runs no more Python than it must

    def apply() -> None:
        isolation.set_parent_death_signal(signal.SIGKILL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:  # enforced for non-root users only; the judge's process watchdog covers root
            resource.setrlimit(resource.RLIMIT_NPROC, (4096, 4096))
        except (ValueError, OSError):
            pass
        if device == "cpu":  # CUDA maps huge virtual ranges, so address-space limits are CPU-only
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    return apply


def fence_on(name: str) -> bool:
    """Whether the fence `name` (a key of FENCE_SWITCHES) is switched on now: the fence self-test may
    have switched one off in this process."""
    return getattr(settings(), FENCE_FIELDS[name])


def fence_self_test(device: str) -> str:
    """Once per machine (and torch/Triton versions), on CUDA: the evaluator's own trivial kernel
    (kernels/evaluator/fence_probe/) must pass inside the fences. If it does not, the fences are switched off
    one at a time until it does, and the choice is kept for later evaluations on this machine, so a
    fence that breaks honest GPU work here (a driver that writes somewhere unexpected, a compiler that
    forks) costs one probe, not every evaluation. The marker lives outside every path a candidate may write. Returns a note for the
    verdict. MARATHON_SANDBOX_SELF_TEST=0 skips it."""
    if device != "cuda" or not settings().sandbox_self_test:
        return ""
    folder = Path(tempfile.gettempdir()) / "marathon-fences"
    folder.mkdir(mode=0o700, exist_ok=True)
    # the set of fences is part of the key: a machine probed before a fence existed probes again
    fence_set = hashlib.sha256(" ".join(sorted(FENCE_SWITCHES)).encode()).hexdigest()[:8]
    marker = folder / f"torch-{torch.__version__}-triton-{triton.__version__}-fences-{fence_set}.json".replace("+", "_")
    import fcntl
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # judges starting together on a fresh machine probe once
        if not marker.exists():
            marker.write_text(json.dumps(_probe_fences(device)))
    choice = json.loads(marker.read_text())
    for name in choice.get("off", []):
        os.environ[FENCE_SWITCHES[name]] = "0"  # this judge process only
    return choice.get("note", "")


def fence_probe_request(device: str) -> EvalRequest:
    """The fence self-test's evaluation: a trivial problem and kernel of the evaluator's own."""
    folder = Path(__file__).resolve().parent / "fence_probe"
    return EvalRequest(problem="fence_probe", problem_source=(folder / "problem.py").read_text(),
                       source=(folder / "candidate.py").read_text(), kernel="fence-self-test", device=device,
                       mode="test", shapes=[{"n": 1000}], probe_shapes=0, timeout_s=180)


def _probe_fences(device: str) -> dict:
    req = fence_probe_request(device)
    tried, failures = [], []
    # the narrowest first: the read allowlist or the program allowlist alone before all of Landlock
    for off in ([], ["landlock_reads"], ["landlock_exec"], ["landlock_reads", "landlock_exec"], ["pid_namespace"],
                ["netns"], ["landlock"], ["seccomp"], ["capabilities"], list(FENCE_SWITCHES)):
        with tempfile.TemporaryDirectory(prefix=confinement.scratch_prefix("marathon-fence-probe")) as tmp:
            req_path, out_path = Path(tmp) / "request.json", Path(tmp) / "verdict.json"
            req_path.write_text(req.model_dump_json())
            env = {**os.environ, variable("sandbox_self_test"): "0", **{FENCE_SWITCHES[n]: "0" for n in off}}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
            try:
                done = subprocess.run([sys.executable, "-m", "kernels.evaluator.judge", str(req_path), str(out_path)],
                                      env=env, cwd=tmp, timeout=400, capture_output=True, text=True, errors="replace")
                # without a verdict, the judge's last line says why (it holds no secret: the probe is our own)
                verdict = json.loads(out_path.read_text()) if out_path.exists() else {
                    "reason": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
            except subprocess.TimeoutExpired:
                verdict = {"reason": "timed out after 400 s"}
            except (OSError, ValueError) as e:
                verdict = {"reason": f"{type(e).__name__}: {e}"}
        tried.append(off)
        if verdict.get("status") == "ok":
            note = "fence self-test passed" if not off else (
                f"fence self-test: the probe kernel failed inside {', '.join(off)} ({'; '.join(failures)[:300]}), "
                f"so {', '.join(off)} stays off on this machine")
            return {"off": off, "note": note}
        failures.append(f"{verdict.get('status', 'no verdict')}: {str(verdict.get('reason', ''))[-160:]}")
    return {"off": [], "note": "fence self-test: the probe kernel fails even without fences; fences kept ("
                              + "; ".join(failures)[:300] + ")"}


# Seeds come from three disjoint ranges (correctness, timing, the judge's clock), each draw one of 2**57
# multiples of 3 (seed % 3 picks a case in some problems; consecutive seeds cycle them): a candidate that
# sees one call's inputs cannot search the seed space for the ones that made them, and so cannot predict
# the next call's inputs and prepare its answer ahead of the clock.
CORRECTNESS_SEEDS, TIMING_SEEDS, CLOCKED_SEEDS = 0, 2**59, 2**60
SEED_DRAWS = 2**57


def fresh_seed(start: int) -> int:
    """A seed of the range that begins at `start`, never seen before in practice; the calls of one
    evaluation add at most a few thousand to it, staying inside the range."""
    return start + 3 * secrets.randbelow(SEED_DRAWS)


# The sandboxes' own processes this judge started and has not ended yet (what end_adopted spares), and
# whether this judge adopts orphans (isolation.become_subreaper; MARATHON_SANDBOX_SUBREAPER=0: not).
SANDBOX_ROOTS: set[int] = set()
SUBREAPER = False


class CandidateProcess:
    """The candidate's process, its command pipe, its reply channel and its wall-clock budget. While
    the judge waits for a reply it watches the process tree: too many processes, too much memory or
    too much disk end the run with a typed verdict.

    Its scratch folder holds `in/` (what it may read: the candidate's source, the problem file, the
    inputs the judge writes) and `work/` (its cwd, HOME and TMPDIR, the only place it may write);
    the judge's own files (the log, references, a file problem's process's folder) sit beside them,
    out of its reach."""

    MODULE = "kernels.evaluator.candidate_process"
    NAME = "candidate"
    WHO = "the candidate"  # in the verdict's reasons
    WRITES = "its scratch directory"  # the folders weighed(), in those reasons
    REPLIES = protocol.CandidateReplies  # what its process may write on the reply pipe

    def __init__(self, device: str, scratch: Path) -> None:
        """Starts the process, which imports torch and Triton and then waits for its assignment
        (`assign`): started ahead of need, it knows nothing of the evaluation until then. It dies with
        the judge (the parent-death signal), runs as PID 1 of a PID namespace of its own (so whatever
        it starts ends with it; MARATHON_SANDBOX_PIDNS=0: not), and serves one candidate only."""
        self.device = device
        self.scratch = scratch
        self.budget_s = 0.0
        self.memory_cap = 0
        self.token = secrets.token_hex(8)
        self.nonce = secrets.token_hex(16)
        self.log_path = scratch / f"{self.NAME}.log"
        self.inputs_dir = scratch / "in"
        self.inputs_dir.mkdir(exist_ok=True)
        self.workdir = scratch / ("work" if self.NAME == "candidate" else self.NAME)  # cwd, HOME, TMPDIR; outputs
        self.workdir.mkdir()
        self.contained = fence_on("pid_namespace")
        read_fd, write_fd = os.pipe()
        self.log = open(self.log_path, "wb")
        entry = ["-m", "kernels.evaluator.contained", self.MODULE] if self.contained else ["-m", self.MODULE]
        self.proc = subprocess.Popen(
            [sys.executable, *entry, "--reply-fd", str(write_fd)],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.workdir,
            env=self.environment(), pass_fds=(write_fd,), start_new_session=True,
            preexec_fn=_limits(device))
        SANDBOX_ROOTS.add(self.proc.pid)
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, "rb")
        self.buffer = b""
        self.polls = 0
        self.records: list[protocol.Record] = []  # every record line received, for the seal's reports and the import
        self.outputs: dict[Path, int] = {}  # output files the judge asked for, and the bytes each may take
        self.assigned = False  # unassigned, it is killed on close: it has nothing to finish

    def environment(self) -> dict[str, str]:
        return confinement.sandbox_env(self.device, self.workdir, self.token, PROJECT_ROOT, triton_cache_dir())

    def caches(self) -> list[str]:
        """Compiler caches it may write besides its folder: Triton's, shared by the candidates."""
        return [triton_cache_dir()]

    def fence_assignment(self, toolchain: str) -> dict:
        """The fences' part of an assignment (protocol.FencedAssignment): the switches (read now: the fence
        self-test may have set them), what it may write and read (kernels/evaluator/fences.py adds the
        system's paths), and which programs it may start."""
        switches = {name: fence_on(name) for name in FENCE_SWITCHES}
        return {"seccomp": switches["seccomp"], "landlock": switches["landlock"],
                "landlock_reads": switches["landlock_reads"], "landlock_exec": switches["landlock_exec"],
                "netns": switches["netns"], "drop_capabilities": switches["capabilities"],
                "writable": os.pathsep.join([str(self.workdir), *self.caches()]),
                "readable": os.pathsep.join([str(self.inputs_dir)]), "toolchain": toolchain}

    def assign(self, source: str, entry: str, budget_s: float, fsize: int, memory_cap: int,
               problem: dict | None = None) -> None:
        """The candidate and its limits: the process loads it, puts up its fences first, and serves
        the judge's commands."""
        self.budget_s = budget_s
        self.memory_cap = memory_cap
        self.assigned = True
        candidate = self.inputs_dir / "candidate.py"
        candidate.write_text(source)
        # on CUDA Triton runs ptxas and the C compiler; on the CPU (its interpreter) nothing
        toolchain = "triton" if self.device == "cuda" else "none"
        self.send(protocol.CandidateAssignment(
            nonce=self.nonce, candidate=str(candidate), entry=entry, device=self.device, **self.fence_assignment(toolchain),
            gpu_memory_fraction=settings().sandbox_gpu_fraction if self.device == "cuda" else 0.0,
            fsize=fsize, seal=settings().sandbox_seal, **(problem or {})))

    def send(self, message: protocol.Message) -> None:
        """An assignment or a request, on the process's stdin."""
        try:
            self.proc.stdin.write(protocol.encode_request(message))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the reply wait reports the death

    def watch(self) -> None:
        """One look at the sandbox's process tree; raises the verdict when it overstepped."""
        self.polls += 1
        pids = isolation.process_tree(self.proc.pid, self.token, orphans=self.polls % 4 == 0)
        limits = settings()
        if len(pids) > limits.sandbox_max_processes:
            self.kill()
            raise Overstepped("rejected", f"{self.WHO} started {len(pids)} processes (limit {limits.sandbox_max_processes}): "
                              "a fork bomb, or work outside the sandbox's process; killed")
        rss = isolation.rss_bytes(pids)
        if rss > self.memory_cap:
            self.kill()
            raise Overstepped("crashed", f"{self.WHO} used {rss / 2**30:.1f} GiB of host memory (limit "
                              f"{self.memory_cap / 2**30:.0f} GiB) and was killed")
        used, files = self._disk_used()
        if files > isolation.MAX_FILES:
            self.kill()
            self.over_quota()
            raise Overstepped("rejected", f"{self.WHO} made more than {isolation.MAX_FILES} files under {self.WRITES} "
                              "and was killed")
        if used > limits.sandbox_disk:
            self.kill()
            self.over_quota()
            raise Overstepped("rejected", f"{self.WHO} wrote {used / 2**20:.0f} MiB under {self.WRITES} "
                              f"(quota {limits.sandbox_disk / 2**20:.0f} MiB) and was killed")

    def _disk_used(self) -> tuple[int, int]:
        """(bytes, files) it wrote where the quota weighs: the folders weighed() and its log, less the
        outputs the judge asked for."""
        used, files = isolation.disk_usage(self.log_path)[0] - self._allowed(), 0
        for folder in self.weighed():
            more_bytes, more_files = isolation.disk_usage(folder)
            used, files = used + more_bytes, files + more_files
        return used, files

    def weighed(self) -> list[Path]:
        """The folders whose bytes and files count against the disk quota: its scratch folder (the shared
        Triton cache, which only Triton's own compiles write, is not its own)."""
        return [self.workdir]

    def over_quota(self) -> None:
        """After the process was killed for its disk: what of its writes outlives the evaluation goes."""

    def expect(self, path: Path, nbytes: int) -> None:
        """An output the judge asked the process to save at `path`: up to its size (and its file's
        framing) it is allowed beside the scratch quota until the judge takes it, so the file problems'
        own sizes are judged; what the candidate itself writes stays under the quota."""
        self.outputs[Path(path)] = nbytes + OUTPUT_FRAMING

    def _allowed(self) -> int:
        total = 0
        for path, allowed in self.outputs.items():
            try:
                total += min(os.lstat(path).st_blocks * 512, allowed)
            except OSError:
                pass
        return total

    def release(self, path: Path) -> None:
        Path(path).unlink(missing_ok=True)
        self.outputs.pop(Path(path), None)

    def take(self, path: Path) -> torch.Tensor:
        """An output file the process saved: loaded (a tensor, from a regular file only), then removed."""
        try:
            return _load_output(path, self.outputs.get(Path(path), OUTPUT_FRAMING))
        finally:
            self.release(path)

    def receive(self) -> protocol.Message:
        """The next line on the reply pipe (a reply or a record line), charging the wait to the
        candidate's budget. A line that is not exactly one of the protocol's messages, with this run's
        nonce, ends the evaluation (protocol.read_reply); nothing of it is used."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > protocol.MAX_LINE_BYTES:
                self.kill()
                raise Outcome("crashed", f"{self.WHO}'s process wrote a line of over {protocol.MAX_LINE_BYTES} bytes "
                              "on the result channel")
            if self.budget_s <= 0:
                self.kill()
                raise Outcome("timeout", f"{self.WHO} exceeded its wall-clock limit and was killed")
            t0 = time.monotonic()
            ready, _, _ = select.select([self.replies], [], [], min(self.budget_s, POLL_S))
            self.budget_s -= time.monotonic() - t0
            if not ready:
                self.watch()
                continue
            chunk = os.read(self.replies.fileno(), 1 << 16)
            if not chunk:
                code = self._exit_code()
                self._sealed(code)
                raise Outcome("crashed", f"{self.WHO}'s process died ({_describe_exit(code)})")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        if not line.strip():
            return self.receive()  # the seal writes its line on a line of its own
        try:
            reply = protocol.read_reply(line, self.nonce, self.REPLIES)
        except protocol.Refused as refused:
            if refused.why == "garbage":
                self._sealed(self._exit_code() if self.proc.poll() is not None else None)
                raise Outcome("crashed", f"{self.WHO}'s process wrote garbage on the result channel") from None
            self.kill()
            if refused.why == "forged":
                raise Outcome("rejected", "a forged line on the result channel (it lacks this run's nonce): "
                              f"{self.WHO} tampered with the sandbox's reply channel") from None
            raise Outcome("crashed", f"{self.WHO}'s process wrote a reply that is not the protocol's on the result "
                          f"channel ({refused.detail})") from None
        if isinstance(reply, SealedReply):
            self.kill()
            raise Outcome("rejected", _sealed_reason(reply))
        return reply

    def _sealed(self, code: int | None) -> None:
        """The process ended by the seal (its exit status): the rejection names the event, from the seal's
        line if it is in what was read."""
        if code != SEAL_EXIT:
            return
        for line in self.buffer.split(b"\n"):
            try:
                reply = protocol.read_reply(line, self.nonce, self.REPLIES)
            except protocol.Refused:
                continue
            if isinstance(reply, SealedReply):
                raise Outcome("rejected", _sealed_reason(reply))
        raise Outcome("rejected", "the sandbox's seal ended the candidate's process (its line did not arrive)")

    def request(self, cmd: protocol.Message, expect: type[R]) -> tuple[R, list[protocol.Record]]:
        """Sends a request; its reply, which must be an `expect`, and the record lines that came before
        it (kernel launches, torch ops, call markers, the seal's reports)."""
        self.send(cmd)
        reply, record = self.reply()
        if isinstance(reply, ErrorReply):
            status = "compile_error" if reply.compile else "crashed"
            what = "failed to compile" if reply.compile else "raised"
            raise Outcome(status, f"{self.WHO} {what}:\n{reply.error}")
        if not isinstance(reply, expect):
            raise Outcome("crashed", f"unexpected reply {reply.kind!r} on the result channel")
        return reply, record

    def reply(self) -> tuple[protocol.Message, list[protocol.Record]]:
        """The next reply, and the record lines before it."""
        record = []
        reply = self.receive()
        while isinstance(reply, protocol.Record):
            record.append(reply)
            reply = self.receive()
        self.records += record
        return reply, record

    def _exit_code(self) -> int | None:
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self) -> str:
        self.log.flush()
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        isolation.kill_tree(self.proc.pid, self.token)  # children that left the group (setsid) too
        self.proc.wait()
        SANDBOX_ROOTS.discard(self.proc.pid)
        if SUBREAPER:  # orphans that left both (setsid, then their parent died) came to this judge
            isolation.end_adopted(SANDBOX_ROOTS)

    def close(self) -> None:
        if self.proc.poll() is None and self.assigned:
            self.send(protocol.ExitRequest())
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()  # the whole tree: children a candidate forked die too
        self.log.close()
        self.replies.close()


PROBLEM_CACHES_KEPT = 8  # other problem files' compiler caches kept (each under the disk quota)


def prune_problem_caches(root: Path, mine: Path, kept: int = PROBLEM_CACHES_KEPT) -> list[str]:
    """Remove the compiler caches under `root` but `mine` past the `kept` most recently used, save those a
    live evaluation holds (or made in the last minute). Returns the names removed."""
    def used(path: Path) -> float:
        try:
            return path.lstat().st_mtime
        except OSError:
            return 0.0
    others = sorted((p for p in root.iterdir() if p != mine), key=used)
    return isolation.remove_unheld(others[:len(others) - kept] if kept else others, older_than_s=60)


class ProblemProcess(CandidateProcess):
    """The fenced process that runs a file problem's code (kernels/evaluator/problem_process.py): the
    same fences as a candidate's, in the evaluation's scratch folder beside it. It reads `in/` (the
    problem file) and writes only `problem/`, where it leaves inputs and references for the judge; the
    candidate cannot read that folder. It may start the compilers torch.compile's baselines use."""

    MODULE = "kernels.evaluator.problem_process"
    NAME = "problem"
    WHO = "the problem file"
    WRITES = "its scratch directory and compiler caches"
    REPLIES = protocol.ProblemReplies

    def __init__(self, device: str, scratch: Path, source: str) -> None:
        # Its compiler caches (Triton's, torch.compile's) are its own file's: kept across evaluations
        # of the same file, so its baselines compile once, and out of reach of candidates and of
        # other files, none of which can plant a slow kernel there
        # (each weighed against the disk quota; other files' caches, least recently used first, go past
        # PROBLEM_CACHES_KEPT unless a live evaluation holds them: anyone can hand in many files)
        digest = hashlib.sha256(source.encode()).hexdigest()[:24]
        root = Path(tempfile.gettempdir()) / "marathon-problem-cache"
        self.cache = root / digest
        for sub in ("triton", "inductor"):
            (self.cache / sub).mkdir(parents=True, exist_ok=True)
        self._cache_hold: int | None = isolation.hold_folder(self.cache, shared=True)
        os.utime(self.cache)
        prune_problem_caches(root, self.cache)
        super().__init__(device, scratch)

    def caches(self) -> list[str]:
        return [str(self.cache)]

    def weighed(self) -> list[Path]:
        """Its compiler caches too: the file's code may write there, and they outlive the evaluation."""
        return [self.workdir, self.cache]

    def over_quota(self) -> None:
        shutil.rmtree(self.cache, ignore_errors=True)

    def reply(self) -> tuple[protocol.Message, list[protocol.Record]]:
        """Weighed after every reply too: its caches outlive the evaluation, and a write quicker than the
        watchdog's poll would otherwise stay there unweighed."""
        got = super().reply()
        self.watch()
        return got

    def close(self) -> None:
        """Once it is gone, what it left in its caches (a thread of the file's may have written after its
        last reply) is weighed a last time: past the quota they are removed."""
        super().close()
        used, files = self._disk_used()
        if used > settings().sandbox_disk or files > isolation.MAX_FILES:
            self.over_quota()
        if self._cache_hold is not None:
            os.close(self._cache_hold)
            self._cache_hold = None

    def environment(self) -> dict[str, str]:
        env = super().environment()
        # torch.compile's compile workers (Python processes, which it may not start) off: it compiles in
        # this process; and no precompiled headers (their cache key is hashed by an openssl process)
        env.update({"TRITON_CACHE_DIR": str(self.cache / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(self.cache / "inductor"),
                    "TORCHINDUCTOR_COMPILE_THREADS": "1", "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0"})
        return env

    def assign_problem(self, problem_file: Path, name: str, param_seed: int, budget_s: float, memory_cap: int) -> None:
        self.budget_s = budget_s
        self.memory_cap = memory_cap
        self.assigned = True
        self.send(protocol.ProblemAssignment(nonce=self.nonce, problem_file=str(problem_file), problem_name=name,
                                             param_seed=param_seed, device=self.device,
                                             # no file bigger than a reference its memory could hold (a
                                             # disk filler dies of SIGXFSZ), as the candidate's
                                             fsize=max(64 * 2**20, memory_cap + OUTPUT_FRAMING) if memory_cap else None,
                                             **self.fence_assignment("torch-compile")))


class ProblemFailed(Outcome):
    """The file problem cannot be judged as asked: its own code failed (its process raised, died or ran
    out of time in it), or a size was given below 1. No verdict on the candidate: `line` is the one
    line (with the file's line) a user reads, the reason keeps the detail."""

    def __init__(self, line: str, reason: str | None = None) -> None:
        super().__init__("crashed", reason or line)
        self.line = " ".join(line.split())


class ShapeRefused(ProblemFailed):
    """A value given for a file problem that its facts refuse (a size below 1): the request's mistake."""


class RemoteFileProblem:
    """A file problem's run-time half as the judge sees it: what kernels/problems/kernelbench_runtime.py's
    FileReference offers the judge (references of seeds' inputs, output specs, bytes, baselines, the
    file's facts), served by a ProblemProcess, so the file's code (its module top level, get_inputs,
    get_init_inputs, Model, the baselines built from it) never runs in the judge. No inputs cross: the
    problem's process makes each seed's inputs on the device for the reference, and the candidate's
    process makes its own from the same seed; references come back as files in the problem's folder."""

    def __init__(self, spec: ProblemSpec, device: str, budget_s: float | None = None) -> None:
        self.spec, self.device = spec, device
        # the file's own code, all told (a caller with less time left gives less: the problem's limit,
        # not the caller's, then ends a file that runs too long, and says so as the problem's failure)
        self.budget_s = settings().problem_timeout_s if budget_s is None else budget_s
        self.param_seed = 0
        self.proc: ProblemProcess | None = None
        self.fences: dict = {}
        self._specs: dict[tuple, tuple] = {}
        self._names: list[str] | None = None
        self._count = 0
        self.last_inputs_s = 0.0  # the problem's process's time making the last reference's inputs

    def start(self, scratch: Path, memory_cap: int) -> None:
        """Starts the process in the evaluation's scratch folder and waits until the file is loaded."""
        problem_file = scratch / "in" / "problem.py"
        problem_file.parent.mkdir(exist_ok=True)
        problem_file.write_text(self.spec.source)
        self.proc = ProblemProcess(self.device, scratch, self.spec.source)
        self.proc.assign_problem(problem_file, self.spec.name, self.param_seed, self.budget_s, memory_cap)
        try:
            fenced = self.proc.receive()
        except Overstepped as outcome:  # the file's top level may run before its fenced reply is read
            raise ProblemFailed(f"problem {self.spec.name}: {outcome.reason}") from None
        except Outcome as outcome:
            if outcome.status == "timeout":
                raise ProblemFailed(f"problem {self.spec.name}: its process did not start in "
                                    f"{self.budget_s:g} s") from None
            raise EvaluatorError(f"the problem's sandbox failed before loading the file ({outcome.reason}):\n"
                                 f"{self.proc.log_tail()[-2500:]}") from None
        if not isinstance(fenced, FencedReply):
            raise ProblemFailed(f"problem {self.spec.name}: its process answered {fenced.kind!r} where 'fenced' was expected")
        self.fences = dict(fenced.fences)
        self._request_reply(None, ProblemReadyReply)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.close()

    def log_tail(self) -> str:
        return self.proc.log_tail() if self.proc is not None else ""

    def _request_reply(self, cmd: protocol.Message | None, expect: type[R]) -> R:
        """A command's reply. Whatever goes wrong in the problem's process is the problem's failure
        (ProblemFailed: the file's own code raised, or its process died or ran out of time running it),
        except an error of the process's own outside the file's code (an I/O error: infrastructure)."""
        try:
            if cmd is not None:
                self.proc.send(cmd)
            reply, _ = self.proc.reply()
        except Outcome as outcome:
            first = outcome.reason.strip().splitlines()[0] if outcome.reason.strip() else outcome.status
            raise ProblemFailed(f"problem {self.spec.name}: {first}",
                                f"{outcome.reason}\n(the problem file's own code failed; the candidate was not "
                                "judged past this point)") from None
        if isinstance(reply, ProblemErrorReply):
            raise ProblemFailed(reply.error, f"the problem file raised: {reply.error}\n{reply.detail}\n(the problem "
                                "file's own code failed; the candidate was not judged past this point)")
        if isinstance(reply, ErrorReply):
            raise EvaluatorError(f"the problem's process failed outside the file's code:\n{reply.error}")
        if not isinstance(reply, expect):
            raise ProblemFailed(f"problem {self.spec.name}: its process answered {reply.kind!r} where "
                                f"{expect.model_fields['kind'].default!r} was expected")
        return reply

    def _spec(self, shape: dict[str, int], dtype: torch.dtype) -> tuple:
        key = (tuple(sorted(shape.items())), dtype)
        if key not in self._specs:
            reply = self._request_reply(SpecRequest(shape=shape, dtype=_dtype_name(dtype)), SpecReply)
            out_dtype = getattr(torch, reply.dtype, None)
            if not isinstance(out_dtype, torch.dtype):
                raise ProblemFailed(f"problem {self.spec.name}: its output's dtype {reply.dtype!r} is not a torch dtype")
            if out_dtype not in JUDGED_OUTPUT_DTYPES:  # the comparison is of real values (a complex one's
                # imaginary part would be dropped unseen, and with it any check of it)
                raise ProblemFailed(f"problem {self.spec.name}: its output is {reply.dtype}; the judge compares real "
                                    f"tensors (floating, integer, boolean): return torch.view_as_real(z) for a complex z")
            perturbed = getattr(torch, reply.perturbed_dtype, None) if reply.perturbed_dtype else None
            if not isinstance(perturbed, torch.dtype) or not perturbed.is_floating_point:
                perturbed = None  # (the clock perturbs a floating-point input only: none allowed for)
            self._specs[key] = (tuple(reply.shape), out_dtype, reply.input_bytes,
                                (min(reply.perturbed_numel, reply.input_bytes) if perturbed else 0, perturbed))
        return self._specs[key]

    def output_spec(self, shape: dict[str, int], dtype: torch.dtype) -> tuple[tuple[int, ...], torch.dtype]:
        return self._spec(shape, dtype)[:2]

    def input_bytes(self, shape: dict[str, int], dtype: torch.dtype) -> int:
        return self._spec(shape, dtype)[2]

    def perturbed(self, shape: dict[str, int], dtype: torch.dtype) -> tuple[int, torch.dtype | None]:
        """The elements and dtype of the input the judge's clock perturbs (timing.perturbed_numel)."""
        return self._spec(shape, dtype)[3]

    def min_bytes(self, shape: dict[str, int], elem: int) -> float:
        return self._request_reply(MinBytesRequest(shape=shape, elem=elem), MinBytesReply).bytes

    def traffic(self, shape: dict[str, int], elem: int):
        from kernels.problems.kernelbench import tensor_flops
        from kernels.problems.spec import Traffic
        try:
            flops = tensor_flops(self.spec, shape)
        except ValueError as exc:  # the file's FLOPS, evaluated here in bounded float arithmetic
            raise ProblemFailed(f"problem {self.spec.name}: {exc}") from None
        return Traffic(self.min_bytes(shape, elem), flops)

    def _file(self, what: str) -> Path:
        self._count += 1
        return self.proc.workdir / f"{what}_{self._count}.pt"

    def reference_for(self, shape: dict[str, int], seed: int, dtype: torch.dtype, device,
                      perturb: tuple[int, int] | None = None) -> torch.Tensor:
        """The reference output for the inputs of this seed (perturbed first by the judge's clock's factors,
        when given), on `device`."""
        ref, _ = self._referenced(shape, seed, dtype, device, perturb=perturb)
        return self._checked(ref, shape, dtype)

    def widened_reference(self, shape: dict[str, int], seed: int, dtype: torch.dtype,
                          device) -> tuple[torch.Tensor | None, list[str]]:
        """The reference for the inputs of this seed with those of one sign widened to both
        (FileReference.widen), and the inputs widened; (None, []) where none is of one sign, (None, names)
        where the widened inputs leave the module's domain (its output is not finite there)."""
        ref, widened = self._referenced(shape, seed, dtype, device, widen=True)
        if ref is None or type(ref) is not torch.Tensor or ref.dtype != torch.float32 or reference_defect(ref):
            return None, widened
        return self._checked(ref, shape, dtype), widened

    def _referenced(self, shape: dict[str, int], seed: int, dtype: torch.dtype, device,
                    **asked) -> tuple[object | None, list[str]]:
        """The reference the problem's process saved for the inputs of this seed (ReferenceRequest's `perturb`
        or `widen` as asked), read onto `device`, unchecked; and the inputs it widened. None for a widening
        with nothing to widen (no reference is made)."""
        path = self._file("reference")
        # the reference (float32) comes back as a file in the process's scratch folder: allowed beside its
        # quota up to its size, so a file's own large sizes are judged; what the file's code writes stays
        # under the quota
        nbytes = math.prod(self.output_spec(shape, dtype)[0]) * 4
        self.proc.expect(path, nbytes)
        try:
            reply = self._request_reply(ReferenceRequest(shape=shape, seed=seed, dtype=_dtype_name(dtype), output=str(path),
                                                         **asked), ReferencedReply)
            self.last_inputs_s = reply.inputs_s
            if asked.get("widen") and not reply.widened:
                return None, []
            return _load_regular(path, device, nbytes + OUTPUT_FRAMING), list(reply.widened)
        finally:
            self.proc.release(path)

    def _checked(self, ref: object, shape: dict[str, int], dtype: torch.dtype) -> torch.Tensor:
        """A reference the file's process saved, as the comparisons need it: a plain float32 tensor of the
        output's shape with at least one value, every value finite. Anything else is the problem's failure:
        a NaN or an Inf in the reference (or a reference of fewer values, broadcast) lets any output through."""
        want = tuple(self.output_spec(shape, dtype)[0])
        where = f"problem {self.spec.name}: its reference at {shape_label(shape) or 'its own sizes'}"
        if type(ref) is not torch.Tensor or ref.dtype != torch.float32 or tuple(ref.shape) != want:
            got = f"a {ref.dtype} tensor of shape {tuple(ref.shape)}" if isinstance(ref, torch.Tensor) else type(ref).__name__
            raise ProblemFailed(f"{where} is {got}, not a float32 tensor of the output's shape {want}")
        defect = reference_defect(ref)
        if defect:
            raise ProblemFailed(f"{where} {defect}")
        return ref

    def baseline_names(self) -> list[str]:
        if self._names is None:
            self._names = list(self._request_reply(BaselineNamesRequest(), BaselineNamesReply).names)
        return self._names

    def time_baselines(self, shape: dict[str, int], seeds: list[int], dtype: torch.dtype, names: list[str],
                       **how) -> dict[str, protocol.BaselineTimed | protocol.BaselineDisagrees | protocol.BaselineFailed]:
        return self._request_reply(BaselinesRequest(shape=shape, seeds=seeds, dtype=_dtype_name(dtype), names=names,
                                                    **how), BaselinesReply).results

    def facts(self, small: bool) -> FileFacts:
        facts = self._request_reply(FactsRequest(small=small), FactsReply).facts
        try:
            return FileFacts.model_validate(facts)
        except protocol.ValidationError as exc:
            raise ProblemFailed(f"problem {self.spec.name}: its process told facts that are not a file's facts "
                                f"({protocol.first_error(exc)})") from None

    def runs(self, shapes: list[dict[str, int]], dtype: torch.dtype) -> list[ReferenceCall]:
        reply = self._request_reply(RunsRequest(shapes=shapes, dtype=_dtype_name(dtype)), RunsReply)
        try:
            return [ReferenceCall.model_validate(c) for c in reply.calls]
        except protocol.ValidationError as exc:
            raise ProblemFailed(f"problem {self.spec.name}: its process told reference runs that are not "
                                f"reference runs ({protocol.first_error(exc)})") from None

    def pids(self) -> set[int]:
        return set(isolation.process_tree(self.proc.proc.pid, self.proc.token)) if self.proc is not None else set()


def file_shapes(spec: ProblemSpec, facts: FileFacts, device: str, asked: list[dict[str, int]] | None,
                set_name: str | None) -> tuple[list[dict[str, int]], str]:
    """A file problem's shapes as judged, and what was chosen by itself (in words, or ""): each is every
    size (the file's value unless given) and the other constants given a value of their own. `asked`:
    the shapes given (--shape), each with every overridable constant (spec.shape); None: the set
    `set_name` (smoke on a CPU: SMOKE_SHAPES, or the small sizes the facts found; bench: the file's own)."""
    if asked is None and set_name == "smoke" and "smoke" not in spec.shape_sets:
        if facts.small is None:
            raise ProblemFailed(facts.small_error or f"problem {spec.name}: no small sizes found for the CPU")
        shape = full_shape(facts.sizes, facts.small)
        note = (f"small sizes chosen for the CPU's interpreter ({shape_label(shape) or 'none to shrink'}: "
                f"{facts.small_elements} elements of inputs and parameters; the file's own: {shape_label(facts.sizes) or 'none'})")
        if facts.small_noise is not None and facts.small_noise > NOISE_REL:
            note += (f"; WARNING: the reference there is rounding noise (its float32 output is {facts.small_noise:.2g} "
                     "from its float64 one, relative) and no sizes tried were better: no kernel can be judged "
                     "correct at these sizes")
        return [shape], note
    if asked is None:
        asked = spec.shapes(set_name or ("bench" if device == "cuda" else "smoke"))
    out = []
    for shape in asked:
        given = {k: v for k, v in shape.items() if v != spec.defaults.get(k)}
        problem = check_given(spec.name, facts.sizes, given)
        if problem:
            raise ShapeRefused(problem)
        out.append(full_shape(facts.sizes, given))
    return out, ""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _load_regular(path: Path, device, max_bytes: int) -> torch.Tensor:
    """A reference the problem file's process wrote (kernels/evaluator/tensor_file.py: only a regular
    file, at most `max_bytes` of tensor, its storage the tensor's own), on `device`. A file that is not
    one is the problem's failure."""
    try:
        out = tensor_file.read(path, max_bytes)
    except OSError as exc:
        raise Outcome("crashed", f"the problem file's process left no readable file {path.name} ({exc.strerror})") from None
    except tensor_file.NotAFile:
        raise Outcome("crashed", f"the problem file's process left {path.name} as something other than a file") from None
    except tensor_file.TensorFileDefect as exc:
        raise ProblemFailed(f"the problem file's process saved a reference that {exc.reason}") from None
    return out.to(device)


def _load_output(path: Path, max_bytes: int) -> torch.Tensor:
    """An output the candidate's process saved (kernels/evaluator/tensor_file.py): a regular file it did
    not swap for a link or a FIFO, at most `max_bytes` of tensor; a file that is not one is rejected."""
    try:
        return tensor_file.read(path, max_bytes)
    except OSError as exc:
        raise Outcome("incorrect", f"the candidate's output {Path(path).name} could not be read ({exc.strerror})") from None
    except tensor_file.TensorFileDefect as exc:
        raise Outcome("rejected", f"the candidate's output {Path(path).name} {exc.reason}") from None


@dataclass
class CallRecord:
    """What the record says about one candidate call (or, for `outside`, about no call)."""
    begun: int = 0
    probed: int = 0
    ended: int = 0
    problems: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    own: int = 0
    ops: Counter = field(default_factory=Counter)
    side: set[str] = field(default_factory=set)
    odd: set[str] = field(default_factory=set)
    options: set[str] = field(default_factory=set)
    threads: int = 0
    suspended: int = 0  # pops of the torch-op monitor before the call's probe: code run unseen


def read_record(lines: list[protocol.Record]) -> tuple[dict[int, CallRecord], CallRecord]:
    """The record lines of a command, in the order written, by call: a call runs from its begin marker
    to its end marker; launches and ops in between are its own; anything else (the seal's reports
    aside) is `outside`."""
    calls: dict[int, CallRecord] = {}
    outside = CallRecord()
    current: CallRecord | None = None
    for line in lines:
        if isinstance(line, protocol.BeginRecord):
            current = calls.setdefault(line.call, CallRecord())
            current.begun += 1
            continue
        if isinstance(line, protocol.EndRecord):
            ended = calls.setdefault(line.call, CallRecord())
            ended.ended += 1
            ended.problems += line.problems
            current = None
            continue
        target = current if current is not None else outside
        if isinstance(line, protocol.ProbeRecord):
            target.probed += 1
        elif isinstance(line, protocol.LaunchRecord):
            target.kernels.append(line.name)
            if line.own and line.name.startswith("candidate."):
                target.own += 1
            if line.side:
                target.side.add(line.name)
            if line.odd:
                target.odd.add(f"{line.name} got {', '.join(line.odd)}")
            if line.options:
                target.options.add(f"{line.name} got {', '.join(line.options)}")
        elif isinstance(line, protocol.OpRecord):
            target.ops[line.name] += 1
        elif isinstance(line, protocol.ThreadRecord):
            target.threads += 1
        elif isinstance(line, protocol.SuspendRecord) and current is not None and not current.probed:
            current.suspended += 1  # (the harness's own pop comes after the probe)
    return calls, outside


def _sealed_reason(line: SealedReply) -> str:
    return (f"the sandbox's seal ended the candidate's process on {line.event[:80]} {line.why[:300]}: an action no "
            "kernel needs (the seal is the run-time layer behind the static policy)")


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            return f"killed by signal {-code}"
        why = {"SIGXFSZ": ": a file outgrew the sandbox's file-size limit (disk quota)",
               "SIGKILL": ": killed (out of memory, or by the watchdog)",
               "SIGSEGV": ": a segmentation fault"}.get(name, "")
        return f"killed by {name}{why}"
    return f"exit status {code}"


def gpu_info() -> Gpu | None:
    if not torch.cuda.is_available():
        return None
    return Gpu(name=torch.cuda.get_device_name(), driver=nvidia_driver())


def probe_value(rng: random.Random, lo: int, hi: int, log: bool) -> int:
    """One dimension of a probe shape in [lo, hi]: uniform, or log-uniform when `log`, from 2 up: a
    single token would come up one draw in seven or ten, and one key makes attention's softmax exactly
    1, which hides any error in the scores (the asked shapes and the tests cover length 1)."""
    if not log:
        return rng.randint(lo, hi)
    lo = min(max(lo, 2), hi)
    return min(hi, max(lo, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))))


CHECKED_TIMED_CALLS = 5  # on CUDA, random outputs of the eager timed calls re-checked (chosen after timing),
CHECKED_OTHER_CALLS = 2  # and of the other phases' calls, plus the last timed call and the last graph replay;
# on the CPU every one
# Calls the judge times by its own clock after the timing run: batches of up to CLOCKED_CALLS back to
# back (on the CPU one batch of 2), each on its own inputs, within CLOCK_INPUT_BYTES of inputs (a batch
# this long spreads the round trip thin); the quicker of CLOCKED_BATCHES batches counts. Their indices
# in the record start at CLOCKED_INDEX.
CLOCKED_CALLS = 64
CLOCKED_BATCHES = 2
CLOCK_INPUT_BYTES = 2**30
# Outputs of timed calls the candidate's process keeps for the re-check, on a GPU: this share of its
# memory at most (the file problems' own sizes: 23_Softmax's output is 6 GiB, forty of them no GPU holds)
KEEP_FRACTION = 0.3
AHEAD_BYTES = 2**30  # references made ahead, while the candidate's process starts, up to this size each
SAVE_BATCH_BYTES = 2**31  # outputs saved as files at once for the judge (at least one), each read and removed before the next
CLOCKED_INDEX = 1_000_000


def test_profile() -> DeviceProfile | None:
    """MARATHON_TEST_DEVICE_PROFILE=name:bytes_per_s:flops_per_s makes the judge apply that roofline
    on any device (tests of the floor check); never set in production."""
    text = settings().test_device_profile
    if not text:
        return None
    name, bw, flops = text.split(":")
    return DeviceProfile(name, float(bw), float(flops), float(flops), 0, "test profile (MARATHON_TEST_DEVICE_PROFILE)")


class Judge:
    def __init__(self, req: EvalRequest) -> None:
        self.req = req
        self.spec: ProblemSpec = get_problem(req.problem, req.problem_source)
        self.device = self._device(req.device)
        dtype_name = req.dtype or self.spec.dtypes[self.device]
        self.dtype = getattr(torch, dtype_name)
        self.tolerance = self.spec.tolerances[dtype_name]
        # a shipped problem's reference is trusted code, imported here; a file problem's runs in a
        # fenced process of its own
        self.reference = (RemoteFileProblem(self.spec, self.device) if self.spec.source is not None
                          else self.spec.reference_module())
        self.gpu = gpu_info() if self.device == "cuda" else None
        self.profile = test_profile() or (profile_for_gpu(self.gpu.name) if self.gpu else None)
        cuda = self.device == "cuda"
        self.reps = max(req.reps or (30 if cuda else 3), 20 if cuda else 1)
        self.warmup = req.warmup if req.warmup is not None else (5 if cuda else 1)
        # fresh seeds every evaluation, so no candidate can know its inputs; seed % 3 keeps the cases
        self.seed_base = fresh_seed(CORRECTNESS_SEEDS)
        self.rng = random.Random(secrets.randbits(64))
        self.remote = isinstance(self.reference, RemoteFileProblem)
        self.file_facts: FileFacts | None = None  # a file problem's, once its process has told them
        if self.remote:  # a file problem's parameters: drawn fresh too, the same in the sandbox
            self.reference.param_seed = self.seed_base
        self.current_shape: dict[str, int] = {}
        self.calls_made = 0  # the index of the last call command (its record is keyed by it)
        # (shape index, seed index) -> (the inputs, for a shipped problem's baselines (None for a file
        # problem's: its process makes its own), the seed, the reference output or None)
        self.prepared: dict[tuple[int, int], tuple[dict | None, int, torch.Tensor | None]] = {}
        self.verdict = Verdict(
            status="ok", reason="", problem=self.spec.name, kernel=req.kernel, mode=req.mode,
            device=self.device, gpu=self.gpu, dtype=dtype_name,
            versions={"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()},
            timing_meaningful=cuda, source_sha256=source_sha256(req.source))
        self.verdict.sandbox["judge_capabilities"] = judge_capabilities()
        self.verdict.sandbox["judge_subreaper"] = SUBREAPER

    @staticmethod
    def _device(wanted: str) -> str:
        if wanted == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if wanted == "cuda" and not torch.cuda.is_available():
            raise EvaluatorError("--device cuda was asked for, but this host has no usable CUDA GPU")
        if wanted not in ("cpu", "cuda"):
            raise EvaluatorError(f"unknown device {wanted!r}; use auto, cpu or cuda")
        return wanted

    def _set_name(self) -> str:
        return self.req.shape_set or ("bench" if self.device == "cuda" else "smoke")

    def shapes(self) -> list[dict[str, int]]:
        """The shapes asked for. A file problem's are settled once its process has told its facts
        (file_shapes: its sizes, and small ones it chose for a CPU); here they are only checked."""
        if self.req.shapes:
            return [self.spec.shape(s) for s in self.req.shapes]
        if self.remote and self._set_name() == "smoke" and "smoke" not in self.spec.shape_sets:
            return []  # chosen by the problem's process (file_shapes)
        return self.spec.shapes(self._set_name())

    def _file_shapes(self, asked: list[dict[str, int]]) -> list[dict[str, int]]:
        """A file problem's shapes from its facts (asked in its fenced process)."""
        with self._phase("problem_facts"):
            smoke = not self.req.shapes and self._set_name() == "smoke" and "smoke" not in self.spec.shape_sets
            facts = self.reference.facts(small=smoke)
            shapes, note = file_shapes(self.spec, facts, self.device, self.req.shapes and asked or None,
                                       self._set_name())
        self.verdict.shapes_note = note
        self.file_facts = facts
        return shapes

    def probe_shapes(self, asked: list[dict[str, int]]) -> list[dict[str, int]]:
        """Random valid shapes the candidate cannot know in advance: odd lengths, head and batch
        counts; head dimensions (KDA's K, V) stay those of the first asked shape."""
        ranges = self.spec.probe_ranges.get(self.device)
        if self.req.mode == "compile" or not ranges or not asked:
            return []
        out = []
        for _ in range(max(self.req.probe_shapes, 0)):
            for _attempt in range(20):
                shape = dict(asked[0])
                shape.update({d: probe_value(self.rng, lo, hi, d in self.spec.log_drawn_dims)
                              for d, (lo, hi) in ranges.items()})
                try:
                    shape = self.spec.shape(shape)
                    if self.remote:  # sizes and the constants given a value of their own, as asked ones
                        shape = file_shapes(self.spec, self.file_facts, self.device, [shape], None)[0][0]
                except ValueError:
                    continue
                if shape not in asked and shape not in out:
                    out.append(shape)
                    break
        return out

    def run(self, prestarted: CandidateProcess | None = None) -> Verdict:
        """The verdict. `prestarted`: a candidate process this judge started ahead of need, in its own
        scratch folder; used when it was started for this evaluation's device, else closed unused."""
        t0 = time.monotonic()
        try:
            try:
                ast.parse(self.req.source)
            except SyntaxError as exc:
                raise Outcome("compile_error", f"syntax error at line {exc.lineno}: {exc.msg}") from None
            except (RecursionError, MemoryError, ValueError) as exc:  # nested past the parser's depth, NUL bytes
                raise Outcome("compile_error", f"the source cannot be parsed: {type(exc).__name__}") from None
            if settings().unsafe_skip_policy:
                self.verdict.flags.append("the static policy was skipped (MARATHON_UNSAFE_SKIP_POLICY): "
                                          "a test of the run-time defences, never a real evaluation")
            else:
                violations = check_source(self.req.source, self.spec.entry_point)
                if violations:
                    raise Outcome("rejected", "the source breaks the candidate policy:\n" + "\n".join(map(str, violations)))
            shapes = self.shapes()
            with self._phase("fence_self_test"):
                self_test = fence_self_test(self.device)
            if prestarted is not None and (prestarted.device != self.device
                                           or prestarted.contained != fence_on("pid_namespace")):
                prestarted.close()  # started for another device, or (after the self-test) in the wrong namespace
                prestarted = None
            with contextlib.ExitStack() as stack:
                if prestarted is None:
                    tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=confinement.scratch_prefix("marathon-eval")))
                    # started now, it imports torch and Triton while this judge prepares the first inputs
                    candidate = CandidateProcess(self.device, Path(tmp))
                else:
                    candidate = prestarted
                    self.verdict.sandbox["prestarted"] = True
                stack.callback(self._close_candidate, candidate)
                if self.remote:
                    stack.callback(self._close_problem)
                    with self._phase("problem_start"):
                        self.reference.start(candidate.scratch, self._memory_cap())
                    self.verdict.sandbox.update({f"problem_{k}": v for k, v in self.reference.fences.items()})
                    shapes = self._file_shapes(shapes)
                probes = self.probe_shapes(shapes)
                candidate.assign(self.req.source, self.spec.entry_point, self.req.timeout_s,
                                 fsize=self._file_limit(shapes + probes), memory_cap=self._memory_cap(),
                                 problem=self._problem_args(candidate.inputs_dir))
                if self_test:
                    self.verdict.sandbox["self_test"] = self_test
                self._judge(candidate, shapes, probes)
        except Outcome as outcome:
            self.verdict.status, self.verdict.reason = outcome.status, outcome.reason
            if isinstance(outcome, ProblemFailed):
                self.verdict.problem_error = outcome.line
        finally:
            self.prepared.clear()
        self._note_missing_fences()
        self.verdict.elapsed_s = round(time.monotonic() - t0, 3)
        if self.verdict.status == "ok" and not self.verdict.reason:
            self.verdict.reason = self._summary()
        return self.verdict

    def _note_missing_fences(self) -> None:
        """The fences that did not take, in the sandboxes that came up (none, when neither did)."""
        missing = []
        if "seccomp" in self.verdict.sandbox:  # the candidate's process reported its fences
            missing += _missing_fences(self.verdict.sandbox, self.device)
        if isinstance(self.reference, RemoteFileProblem) and self.reference.fences:
            missing += [f"{k} (problem file)" for k in _missing_fences(self.reference.fences, self.device)]
        if missing:
            self.verdict.sandbox["missing"] = ", ".join(missing)

    def _close_candidate(self, candidate: CandidateProcess) -> None:
        self.verdict.log_tail = candidate.log_tail()
        candidate.close()
        reports = Counter(f"{r.event} {r.why}" for r in candidate.records if isinstance(r, SealRecord))
        if reports:  # MARATHON_SANDBOX_SEAL=report: what the seal would have ended the process for
            self.verdict.flags.append("the seal would have ended the candidate's process for: " + "; ".join(
                f"{what} (x{n})" for what, n in reports.most_common(20)))

    def _close_problem(self) -> None:
        if self.verdict.problem_error:  # the problem file's own output, where it failed
            tail = self.reference.log_tail().strip()
            if tail:
                self.verdict.log_tail = (self.verdict.log_tail + "\n--- the problem file's process ---\n" + tail)[-LOG_TAIL_CHARS:]
        self.reference.close()

    def _problem_args(self, scratch: Path) -> dict:
        """For a file problem, what the sandbox needs to build the candidate's ModelNew: the problem's
        source, its name and the seed of Model's parameters."""
        if self.spec.source is None:
            return {}
        path = scratch / "problem.py"
        path.write_text(self.spec.source)
        return {"problem_file": str(path), "problem_name": self.spec.name, "param_seed": self.seed_base}

    def _file_limit(self, shapes: list[dict[str, int]]) -> int:
        """RLIMIT_FSIZE for the candidate: room for the largest output the sandbox must save, and
        for a log, no more (a disk filler dies of SIGXFSZ)."""
        largest = max(math.prod(self.reference.output_spec(s, self.dtype)[0]) for s in shapes) * self.dtype.itemsize
        return max(64 * 2**20, 2 * largest + 16 * 2**20)

    def _memory_cap(self) -> int:
        return settings().sandbox_memory_bytes(self.device)

    @contextlib.contextmanager
    def _phase(self, name: str):
        """Adds the time spent inside to the verdict's phases_s[name]: where an evaluation's seconds go."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            phases = self.verdict.phases_s
            phases[name] = round(phases.get(name, 0.0) + time.monotonic() - t0, 3)

    def _seeds(self) -> int:
        return 1 if self.req.mode == "compile" else max(self.req.seeds, 1)

    def _prepare(self, index: int, shape, s: int) -> tuple[dict | None, int, torch.Tensor | None]:
        """A shape's s-th correctness seed: its inputs (a shipped problem's, made here; a file problem's
        are made in its own process and in the candidate's, from the seed, on the device), the seed and
        the reference output (none in compile mode, which checks nothing); made once, when first needed."""
        if (index, s) not in self.prepared:
            seed = self.seed_base + s
            inputs, ref = None, None
            if self.remote:
                if self.req.mode != "compile":
                    with self._phase("reference"):
                        ref = self.reference.reference_for(shape, seed, self.dtype, self.device)
                    self._move_phase("reference", "inputs", self.reference.last_inputs_s)
            else:
                with self._phase("inputs"):
                    inputs = self.reference.make_inputs(shape, seed, self.device, self.dtype)
                if self.req.mode != "compile":
                    with self._phase("reference"):
                        ref = self.reference.reference(**inputs)
            self.prepared[(index, s)] = (inputs, seed, ref)
        return self.prepared[(index, s)]

    def _move_phase(self, source: str, target: str, seconds: float) -> None:
        """Seconds a phase held that belong to another (the problem's process made the inputs, then the reference)."""
        phases = self.verdict.phases_s
        seconds = min(seconds, phases.get(source, 0.0))
        phases[source] = round(phases.get(source, 0.0) - seconds, 3)
        phases[target] = round(phases.get(target, 0.0) + seconds, 3)

    def _output_bytes(self, out_shape, out_dtype) -> int:
        return math.prod(out_shape) * out_dtype.itemsize

    def _judge(self, candidate: CandidateProcess, shapes, probes) -> None:
        # the first shape's references are made while the candidate's process starts (sandbox_start is
        # what is left to wait): it sees none of them; it makes each call's inputs itself from the seed
        # the call names, and the reference never enters it
        # (one seed only when an output is large: each reference waits on the device until compared)
        out_shape, out_dtype = self.reference.output_spec(shapes[0], self.dtype)
        ahead = self._seeds() if self._output_bytes(out_shape, out_dtype) <= AHEAD_BYTES else 1
        for s in range(ahead):
            self._prepare(0, shapes[0], s)
        with self._phase("sandbox_start"):
            ready = self._ready(candidate)
        if ready.banned_modules:
            raise Outcome("rejected", f"importing the candidate loaded {', '.join(ready.banned_modules)}")
        self._unchecked_source(ready.unchecked_source, " when it was imported")
        noop_checked = False
        for index, (shape, probe) in enumerate([(s, False) for s in shapes] + [(s, True) for s in probes]):
            result = ShapeResult(shape=shape, correct=False)
            self.current_shape = shape
            (self.verdict.probe_shapes if probe else self.verdict.shapes).append(result)
            if probe:
                result.note = "probe shape, drawn at random for this evaluation: correctness only"
            out_shape, out_dtype = self.reference.output_spec(shape, self.dtype)
            out_bytes = self._output_bytes(out_shape, out_dtype)
            input_sets = []
            for s in range(self._seeds()):
                inputs, seed, ref = self._prepare(index, shape, s)
                out_path = candidate.workdir / f"out_{index}_{s}.pt"
                with self._phase("candidate_calls"):
                    self._call(candidate, seed, out_path, out_shape, out_dtype, fill=FILL_A)
                if self.req.mode == "compile":
                    candidate.release(out_path)
                    result.note = "compiled and ran once; not checked"
                    return
                out = candidate.take(out_path)
                del self.prepared[(index, s)]
                self._check(result, shape, f"seed {seed}", out, ref)
                result.seeds = s + 1
                if not noop_checked:
                    with self._phase("candidate_calls"):
                        self._noop_check(candidate, seed, candidate.workdir / f"noop_{index}.pt", out, out_shape, out_dtype)
                    noop_checked = True
                if s == 0:  # the same inputs again, fresh memory filled differently: same output?
                    again_path = candidate.workdir / f"again_{index}.pt"
                    with self._phase("candidate_calls"):
                        self._call(candidate, seed, again_path, out_shape, out_dtype, fill=FILL_B)
                    self._reproducible(shape, out, candidate.take(again_path), ref)
                if not probe:
                    input_sets.append(seed if self.remote else inputs)
                del out, ref, inputs
                self._give_back()
            if index == 0 and self.remote:
                self._widened_check(candidate, result, shape, out_shape, out_dtype)
            result.correct = True
            if self.req.mode == "full" and not probe:
                self._time(candidate, result, shape, input_sets, out_bytes)
            candidate.request(ForgetRequest(), ForgotReply)
            del input_sets
            if self.device == "cuda":
                torch.cuda.empty_cache()

    def _widened_check(self, candidate, result: ShapeResult, shape, out_shape, out_dtype) -> None:
        """A file problem's inputs of one sign (torch.rand's) widened to both, once, at the first shape: a
        kernel right only on the problem's own input distribution computes another function. Judged with a
        looser tolerance (the widened inputs may be worse conditioned); a kernel computing the module's
        function is far inside it, one that skips a branch the problem's inputs never take far outside."""
        seed = fresh_seed(CORRECTNESS_SEEDS)  # a draw of its own
        with self._phase("reference"):
            ref, widened = self.reference.widened_reference(shape, seed, self.dtype, self.device)
        self._move_phase("reference", "inputs", self.reference.last_inputs_s)
        if not widened:
            return
        names = ", ".join(widened)
        if ref is None:
            result.note = (result.note + "; " if result.note else "") + (
                f"not checked on widened inputs: the module's output is not finite with {names} widened to both signs")
            return
        out_path = candidate.workdir / "widened.pt"
        with self._phase("candidate_calls"):
            self._call(candidate, seed, out_path, out_shape, out_dtype, widen=True)
        out = candidate.take(out_path)
        rel, max_abs, why = self._wrong(out, ref, loose=WIDENED_LOOSENESS)
        del out, ref
        self._give_back()  # (at a file's own sizes the two held GiBs the candidate's timing needs)
        if why:
            raise Outcome("incorrect", f"wrong answer at {shape_label(shape)} on inputs widened to both signs ({names} "
                          f"times +-{WIDEN_FACTOR:g}, value by value; the problem's own are all of one sign): {why}. "
                          "A kernel right only on the problem's own inputs computes another function")

    def _wrong(self, out: torch.Tensor, ref: torch.Tensor, loose: float = 1.0) -> tuple[float, float, str | None]:
        """(rel_err, max_abs_err, why the output is wrong or None) against the reference. The output's shape
        must be the reference's (no broadcasting), and every test fails closed: a NaN anywhere is wrong, and
        so is an output of a dtype no reference has (a complex one would be compared by its real part).
        `loose` scales a floating output's tolerance (integers are exact regardless)."""
        if tuple(out.shape) != tuple(ref.shape):
            return math.inf, math.inf, f"an output of shape {tuple(out.shape)} where {tuple(ref.shape)} was asked for"
        if out.dtype not in JUDGED_OUTPUT_DTYPES:
            return math.inf, math.inf, f"an output of dtype {out.dtype}, which is compared with no reference"
        rel, max_abs, finite = compare(out, ref)
        if not finite:
            return rel, max_abs, "NaN or Inf in the output"
        if not out.dtype.is_floating_point:
            # integers and booleans (indices, counts, masks) are exact: a tolerance scaled by the largest
            # value would pass an index off by one. The reference is their float32 rounding, and so is
            # the output's conversion; ties (an argmax of equal values) may differ in a few places.
            wrong = int((out.to(ref.device, torch.float32) != ref).sum().item())
            allowed = out.numel() // INTEGER_MISMATCH_DIVISOR
            if wrong > allowed:
                return rel, max_abs, (f"{wrong} of {out.numel()} values differ from the reference ({str(out.dtype).removeprefix('torch.')} "
                                      f"outputs are compared exactly; at most {allowed} may differ, for ties)")
            return rel, max_abs, None
        bound = loose * self.tolerance.abs_frac * ref.abs().max().item()
        limit = loose * self.tolerance.rel
        if not (rel <= limit and max_abs <= bound):
            return rel, max_abs, (f"rel_err {rel:.3g} (limit {limit:g}), max_abs_err {max_abs:.3g} "
                                  f"(limit {bound:.3g})")
        return rel, max_abs, None

    def _check(self, result: ShapeResult, shape, what: str, out: torch.Tensor, ref: torch.Tensor) -> None:
        rel, max_abs, why = self._wrong(out, ref)
        result.rel_err = rel if result.rel_err is None else max(result.rel_err, rel)
        result.max_abs_err = max_abs if result.max_abs_err is None else max(result.max_abs_err, max_abs)
        if why:
            raise Outcome("incorrect", f"wrong answer at {shape_label(shape)}, {what}: {why}")

    def _reproducible(self, shape, out: torch.Tensor, again: torch.Tensor, ref: torch.Tensor) -> None:
        """Two runs on the same inputs, fresh memory filled with 0xFF and then 0x7B: a kernel that
        reads memory it never wrote gives different answers; an honest one the same, up to atomics."""
        if torch.equal(out, again):
            return
        diff = (again.float() - out.float()).abs().nan_to_num(math.inf).max().item()
        bound = REPRODUCIBLE_FRAC * ref.abs().max().item()
        if diff <= bound:
            note = f"the output is not bitwise reproducible at {shape_label(shape)} (max diff {diff:.3g}): atomics?"
            if note not in self.verdict.flags:
                self.verdict.flags.append(note)
            return
        raise Outcome("incorrect", f"the output depends on uninitialised memory: at {shape_label(shape)} two runs on the "
                      f"same inputs, with fresh memory filled with 0x{FILL_A:02X} and then 0x{FILL_B:02X}, differ by "
                      f"up to {diff:.3g} (a kernel reads memory it never wrote, or leaves output unwritten)")

    def _ready(self, candidate: CandidateProcess) -> CandidateReadyReply:
        try:
            fenced = candidate.receive()
        except Outcome as outcome:
            if outcome.status == "timeout" or isinstance(outcome, Overstepped):  # its import may have begun
                raise
            # nothing of the candidate's has run yet: the sandbox itself failed to start (CUDA, Triton)
            raise EvaluatorError(f"the sandbox failed before loading the candidate ({outcome.reason}):\n"
                                 f"{candidate.log_tail()[-2500:]}") from None
        if not isinstance(fenced, FencedReply):
            raise Outcome("crashed", f"unexpected reply {fenced.kind!r} on the result channel")
        self.verdict.sandbox.update(fenced.fences)
        self.verdict.sandbox["seal"] = settings().sandbox_seal
        reply, _ = candidate.reply()
        if isinstance(reply, ErrorReply):
            raise Outcome("compile_error", f"the candidate failed to import:\n{reply.error}")
        if not isinstance(reply, CandidateReadyReply):
            raise Outcome("crashed", f"unexpected reply {reply.kind!r} on the result channel")
        return reply

    def _call(self, candidate, seed: int, out_path, out_shape, out_dtype, noop: bool = False,
              fill: int = FILL_A, widen: bool = False) -> CalledReply:
        """One call of the candidate on the inputs of `seed`, which its process makes itself (on the
        device, as the reference's were made): no input file passes through its scratch folder. Its
        output comes back as a file there, allowed beside the scratch quota (CandidateProcess.expect)."""
        self.calls_made += 1
        index = self.calls_made
        candidate.expect(out_path, self._output_bytes(out_shape, out_dtype))
        facts, record = candidate.request(CallRequest(
            problem=self.spec.name, seed=seed, output=str(out_path), shape=list(out_shape), dtype=_dtype_name(out_dtype),
            noop=noop, fill=fill, problem_shape=self.current_shape, index=index, input_dtype=_dtype_name(self.dtype),
            widen=widen),
            CalledReply)
        banned = [m for m in facts.new_modules if module_violation(m)]
        if banned:
            raise Outcome("rejected", f"calling the candidate loaded {', '.join(banned)}")
        if noop:
            return facts
        calls, outside = read_record(record)
        call = calls.get(index, CallRecord())
        self.verdict.kernels_launched = list(dict.fromkeys(self.verdict.kernels_launched + call.kernels))
        self._record_checks(calls, outside, [index], "")
        if facts.output_problem:
            raise Outcome("incorrect", f"the candidate {facts.output_problem}")
        self._facts(facts, "")
        if not call.own:
            raise Outcome("rejected", "no Triton kernel of the candidate's own was launched")
        if facts.inputs_mutated:
            raise Outcome("rejected", "the candidate modified its inputs")
        return facts

    def _record_checks(self, calls: dict[int, CallRecord], outside: CallRecord, expected: list[int], when: str) -> None:
        """What the record says the candidate did: every call asked for has its begin, the probe the harness
        makes after the candidate returns, and its end; no computing torch op, foreign kernel, side stream or
        odd argument in any call; nothing launched or computed outside the calls once they began."""
        for index in expected:
            call = calls.get(index)
            if call is None or not call.begun or not call.ended or call.probed < call.begun:
                if call is not None and call.problems:
                    break  # said below, more precisely
                raise Outcome("rejected", f"the sandbox's record of call {index}{when} is incomplete (no "
                              f"{'begin' if call is None or not call.begun else 'end' if not call.ended else 'probe'}): "
                              "its torch-op monitor or launch record was removed or bypassed")
        everything = list(calls.values()) + [outside]
        problems = sorted({p for c in everything for p in c.problems})
        if problems:
            raise Outcome("rejected", f"a candidate call{when} left the sandbox altered: {'; '.join(problems)} "
                          "(harness steps after the call would run the candidate's code)")
        suspended = sum(c.suspended for c in everything)
        if suspended:
            raise Outcome("rejected", f"torch's op monitor was suspended {suspended} time(s) during a call{when}: torch "
                          "does so to run code no mode may see, such as printing a tensor (repr, str, an f-string), "
                          "which reads its values into Python; a launcher may not read tensor values")
        ops = sum((c.ops for c in everything), Counter())
        if ops:
            listed = ", ".join(f"{k} x{v}" for k, v in sorted(ops.items()))
            raise Outcome("rejected", f"torch computed part of the answer{when} ({listed}); torch may only "
                          "allocate, view, copy and cast: the arithmetic must be in the candidate's Triton kernels")
        foreign = sorted({k for c in everything for k in c.kernels if not k.startswith("candidate.")})
        if foreign:
            raise Outcome("rejected", f"kernels not defined in the candidate ran{when}: {', '.join(foreign)}")
        side = sorted({k for c in everything for k in c.side})
        if side:
            raise Outcome("rejected", f"the candidate launched {', '.join(side)} on a stream other "
                          f"than the caller's{when}: work hidden from the clock")
        odd = sorted({k for c in everything for k in c.odd})
        if odd:
            raise Outcome("rejected", f"a kernel argument was not a plain tensor, scalar or descriptor{when} "
                          f"({'; '.join(odd)}): its methods could run the answer inside the launch")
        options = sorted({k for c in everything for k in c.options})
        if options:
            settings = ", ".join(sorted(protocol.LAUNCH_OPTIONS - {"grid", "warmup"}))
            raise Outcome("rejected", f"a kernel launch passed compile options{when} ({'; '.join(options)}): a launch "
                          f"takes the kernel's parameters and {settings}; other options reach Triton's compiler "
                          "(files loaded by path in place of the kernel, ptxas's command line)")
        if outside.kernels:
            raise Outcome("rejected", f"the candidate's kernels ran outside its calls{when} "
                          f"({', '.join(sorted(set(outside.kernels)))}): work deferred out of the clock")
        threads = sum(c.threads for c in everything)
        if threads:
            note = f"the candidate started {threads} thread(s){when}"
            if note not in self.verdict.flags:
                self.verdict.flags.append(note)

    def _facts(self, facts: protocol.CallFacts, when: str) -> None:
        """What the harness saw after a call (or, with `when`, after the timed calls)."""
        self._tampered(facts.tampered, when)
        self._unchecked_source(facts.unchecked_source, when)
        if facts.threads_alive:
            raise Outcome("rejected", f"the candidate left threads running after its call{when} "
                          f"({', '.join(facts.threads_alive)}): work hidden from the clock")
        if facts.state_changed:
            note = ("module-level state changed between calls" + (when or " of one shape") + ": "
                    + ", ".join(facts.state_changed) + " (state that persists across calls: a cache?)")
            if note not in self.verdict.flags:
                self.verdict.flags.append(note)

    @staticmethod
    def _unchecked_source(functions: list[str], when: str) -> None:
        if functions:
            raise Outcome("rejected", f"the kernel's source as Triton reads it is not the source that was checked{when} "
                          f"({'; '.join(functions[:5])}): Triton re-reads a kernel's source lines and cuts them by "
                          "text, so a string holding a `def` line can put code the policy never saw in its place")

    @staticmethod
    def _tampered(tampered: list[str], when: str) -> None:
        if tampered:
            raise Outcome("rejected", f"the candidate changed the harness{when}: {', '.join(tampered)} "
                          "(modules and classes the measurement relies on are sealed before the candidate is loaded)")

    def _noop_check(self, candidate, seed: int, out_path, real_out, out_shape, out_dtype) -> None:
        """With the candidate's kernels turned into no-ops the output must change: otherwise
        something other than its kernels produced the answer."""
        facts = self._call(candidate, seed, out_path, out_shape, out_dtype, noop=True)
        if facts.output_problem is not None:
            candidate.release(out_path)
            return  # it could not even build an output without its kernels: fine
        hollow = candidate.take(out_path)
        if torch.equal(hollow.float().nan_to_num(0.0), real_out.float().nan_to_num(0.0)):
            raise Outcome("rejected", "the output did not change with the candidate's Triton kernels disabled: "
                          "the answer does not come from its kernels")

    def _time(self, candidate, result: ShapeResult, shape, input_sets, out_bytes: int) -> None:
        """Timed calls on fresh inputs in refilled buffers; then outputs of timed calls re-checked.
        `input_sets`: a shipped problem's correctness inputs, or a file problem's seeds (its baselines'
        inputs are made in its process)."""
        slots = 2
        seed0 = fresh_seed(TIMING_SEEDS)
        cuda = self.device == "cuda"
        if cuda:
            with self._phase("gpu_wait"):
                self._wait_for_quiet_gpu(candidate)
        with self._phase("timing"):
            reply, record = candidate.request(TimeRequest(
                problem=self.spec.name, shape=shape, dtype=_dtype_name(self.dtype), seed_base=seed0, slots=slots,
                reps=self.reps, warmup=self.warmup, sync_reps=5 if cuda else 0, graph=cuda,
                keep_bytes=self._keep_bytes()), TimedReply)
        facts = reply.facts
        banned = [m for m in facts.new_modules if module_violation(m)]
        if banned:
            raise Outcome("rejected", f"calling the candidate loaded {', '.join(banned)}")
        if facts.output_problem:
            raise Outcome("incorrect", f"the candidate {facts.output_problem}")
        self._facts(facts, " during the timed calls")
        phases = reply.phases
        asked = {"warmup": self.warmup, "timed": self.reps, "sync": 5 if cuda else 0}
        if any(len(phases.get(name, [])) != n for name, n in asked.items()) or len(reply.times_us) != self.reps:
            raise Outcome("rejected", "the timing run did not make the calls the judge asked for "
                          f"({ {k: len(v) for k, v in phases.items()} } against {asked})")
        eager = [i for name in asked for i in phases.get(name, [])]
        calls, outside = read_record(record)
        self._record_checks(calls, outside, eager, " during the timed calls")
        idle = [i for i in eager if not calls[i].own]
        if idle:
            raise Outcome("rejected", f"{len(idle)} timed call(s) launched none of the candidate's "
                          "kernels: outputs replayed or cached instead of computed")
        with self._phase("recheck_timed_calls"):
            self._recheck(candidate, shape, phases, seed0 + slots, set(reply.kept), out_bytes)
        result.timing = _timing(reply)
        result.latency_us = result.timing.median_us
        input_bytes = (self.reference.input_bytes(shape, self.dtype) if self.remote else
                       sum(v.numel() * v.element_size() for v in input_sets[0].values() if isinstance(v, torch.Tensor)))
        perturbed = (self.reference.perturbed(shape, self.dtype) if self.remote
                     else timing.perturbed_numel(input_sets[0]))
        with self._phase("judge_clock"):
            self._clock(candidate, result, shape, input_bytes, out_bytes, perturbed)
        if cuda and reply.sync_wall_us:  # the least of them: a busy host only adds, work hidden adds to every call
            self._wall_check(result, shape, min(reply.sync_wall_us))
        if self.req.baselines:
            with self._phase("baselines"):
                self._baselines(result, input_sets)
        for name, us in result.baselines.items():
            # four significant figures: a CPU's 0.000912x must not round to 0.0009x
            result.speedup[name] = float(f"{us / result.latency_us:.4g}") if result.latency_us > 0 else math.inf
        self._speed_checks(result, shape)

    def _wait_for_quiet_gpu(self, candidate) -> None:
        """No timing beside another process on this GPU (an orphaned evaluation, someone else's job):
        wait for it to leave, up to a bound; the verdict says whom it waited for."""
        uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
        query = gpu_quiet.nvidia_smi_query(f"GPU-{uuid}" if uuid else None)
        problem = self.reference.pids if isinstance(self.reference, RemoteFileProblem) else set
        ours = lambda: {os.getpid(), *isolation.process_tree(candidate.proc.pid, candidate.token), *problem()}  # noqa: E731
        note = gpu_quiet.wait_for_quiet_gpu(query, ours)
        if note and note not in self.verdict.gpu_shared:
            self.verdict.gpu_shared = "; ".join(filter(None, [self.verdict.gpu_shared, note]))

    def _give_back(self) -> None:
        """What a comparison freed goes back to the device, not to this process's cache: the candidate's
        process and a file problem's share the GPU with the judge (at a file's own sizes, one output is
        GiBs)."""
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def _keep_bytes(self) -> int | None:
        """How much of the timed calls' outputs the candidate's process may keep for the re-check: on a
        GPU a share of its memory (past it the process keeps a uniform random sample of the calls,
        drawn call by call after each returns); on the CPU all of them."""
        if settings().keep_output_bytes is not None:  # a smaller share, anywhere (tests of the sampling)
            return settings().keep_output_bytes
        if self.device != "cuda":
            return None
        return int(KEEP_FRACTION * torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)

    def _saved(self, candidate, indices: list[int], out_bytes: int, clear: bool):
        """The outputs of these calls, saved by the candidate's process a batch of at most SAVE_BATCH_BYTES
        at a time (at least one), each loaded and its file removed before the next batch: the outputs'
        files in its scratch folder stay bounded. Yields (index, output or None, the save's reply)."""
        per = max(1, SAVE_BATCH_BYTES // max(out_bytes, 1))
        batches = [indices[k:k + per] for k in range(0, len(indices), per)] or [[]]
        for n, batch in enumerate(batches):
            for i in batch:
                candidate.expect(candidate.workdir / f"timed_{i}.pt", out_bytes)
            saved, _ = candidate.request(SaveTimedRequest(indices=batch, dir=str(candidate.workdir),
                                                          clear=clear and n == len(batches) - 1), SavedReply)
            for i in batch:
                path = saved.files.get(str(i))
                if path is None or Path(path) != candidate.workdir / f"timed_{i}.pt":
                    candidate.release(candidate.workdir / f"timed_{i}.pt")
                    yield i, None, saved
                else:
                    yield i, candidate.take(Path(path)), saved

    def _recheck(self, candidate, shape, phases: dict, seed_offset: int, kept: set[int], out_bytes: int) -> None:
        """Outputs of timed calls, picked after the timing (from those the candidate's process kept: all
        of them, or past its memory share a uniform sample drawn call by call), against the reference
        on their inputs."""
        every = [i for name in ("warmup", "timed", "sync", "graph") for i in phases.get(name, []) if i in kept]
        if self.device == "cuda":
            # most from the calls whose median is reported: skipping work on enough of them to move the
            # median (over half) escapes 5 picks from 30 calls about one time in 300
            timed = [i for i in phases["timed"] if i in kept]
            picked = set(self.rng.sample(timed, min(CHECKED_TIMED_CALLS, len(timed))))
            rest = [i for i in every if i not in picked]
            picked.update(self.rng.sample(rest, min(CHECKED_OTHER_CALLS, len(rest))))
            picked.update(i for i in phases["timed"][-1:] + phases.get("graph", [])[-1:] if i in kept)
        else:
            picked = set(every)
        if not picked:
            raise Outcome("rejected", "the timing run kept none of the timed calls' outputs for the re-check")
        where = {i: name for name in phases for i in phases[name]}
        order = sorted(picked)
        refs = self._references(shape, [seed_offset + i for i in order])
        for i, out, _ in self._saved(candidate, order, out_bytes, clear=True):
            ref = next(refs)
            if out is None:
                raise Outcome("incorrect", f"timed call {i} ({where.get(i)}) returned no usable output")
            _, _, why = self._wrong(out, ref)
            if why:
                raise Outcome("incorrect", f"the output of timed call {i} ({where.get(i)} phase, fresh inputs in "
                              f"refilled buffers) at {shape_label(shape)} is wrong ({why}): outputs of timed calls are "
                              "re-checked, so cached, replayed or skipped work fails here")
            del out, ref
            self._give_back()

    def _references(self, shape, seeds: list[int]):
        """The reference outputs for the inputs of these seeds, in order. A file problem's come from its
        process, which makes each seed's inputs itself. Where a shipped problem has a batch dimension,
        inputs are stacked along it and run through the reference together, up to ~1 GB of inputs at a
        time: the reference of a KDA call is thousands of small launches, so one run for six calls
        instead of six saves seconds per evaluation."""
        if self.remote:
            for seed in seeds:
                yield self.reference.reference_for(shape, seed, self.dtype, self.device)
            return
        stack: list[dict] = []
        size = 0
        for k, seed in enumerate(seeds):
            inputs = self.reference.make_inputs(shape, seed, self.device, self.dtype)
            if self.spec.batch_dim is None:
                yield self.reference.reference(**inputs)
                continue
            stack.append(inputs)
            size += sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))
            if size >= 2**30 or k == len(seeds) - 1:
                if len(stack) == 1:
                    yield self.reference.reference(**stack[0])
                else:
                    stacked = {name: torch.cat([x[name] for x in stack]) if isinstance(v, torch.Tensor) else v
                               for name, v in stack[0].items()}
                    yield from self.reference.reference(**stacked).split(shape[self.spec.batch_dim])
                stack, size = [], 0

    def _clock(self, candidate, result: ShapeResult, shape, input_bytes: int, out_bytes: int,
               perturbed: tuple[int, torch.dtype | None] = (0, None)) -> None:
        """Calls timed by the judge's own clock, across the process boundary. A batch is armed outside
        the clock: fresh inputs for each call and, on a GPU, the calls captured in a CUDA graph, then the
        inputs refilled with other values. The fire command brings factors that perturb one input of each
        call (so nothing could be computed for its inputs before the clock started) and positions for a
        digest; the sandbox replays the graph (or, where the candidate cannot be captured, makes the calls
        eagerly), and the reply that stops the clock carries the digest of the outputs. They are then
        checked against the reference on the same inputs and against the digest. Nothing in the
        candidate's process decides this time, so a patched timer, forged statistics or an answer
        computed after the clock stopped (lazily, in the untimed checking) fails here even with every
        in-process record forged. On a GPU twice: the quicker batch counts."""
        cuda = self.device == "cuda"
        n = max(2, min(CLOCKED_CALLS, CLOCK_INPUT_BYTES // max(input_bytes, 1))) if cuda else 2
        dtype = str(self.dtype).removeprefix("torch.")
        pings = []
        for _ in range(3):  # the round trip with no work: what the batch's own round trip holds besides the calls
            t0 = time.perf_counter()
            candidate.request(PingRequest(), PongReply)
            pings.append((time.perf_counter() - t0) * 1e6)
        per_call, graphed = [], True
        for batch in range(CLOCKED_BATCHES if cuda else 1):
            seed0 = fresh_seed(CLOCKED_SEEDS)
            capture_seeds, seeds = [seed0 + k for k in range(n)], [seed0 + n + k for k in range(n)]
            index = CLOCKED_INDEX + batch * 4 * CLOCKED_CALLS
            draw = lambda: secrets.randbelow(timing.DIGEST_MODULUS - 1) + 1  # noqa: E731
            a, b, pa, pb, da, db = (draw() for _ in range(6))
            armed, armed_record = candidate.request(ArmRequest(
                problem=self.spec.name, shape=shape, dtype=dtype, capture_seeds=capture_seeds, seeds=seeds, index=index,
                a=a, b=b, graph=cuda), ArmedReply)
            graphed = graphed and armed.graph
            t0 = time.perf_counter()
            reply, fired_record = candidate.request(FireRequest(pa=pa, pb=pb, da=da, db=db), FiredReply)
            per_call.append((time.perf_counter() - t0) * 1e6 / n)
            if reply.output_problem:
                raise Outcome("incorrect", f"the candidate {reply.output_problem} (a call timed by the judge)")
            calls, outside = read_record(armed_record + fired_record)
            indices = [index + k for k in range(2 * n if armed.graph else n)]
            where = " during the calls timed by the judge"
            self._record_checks(calls, outside, indices, where)
            if not all(calls[i].own for i in indices):
                raise Outcome("rejected", f"a call{where} launched none of the candidate's kernels")
            kept = [index + k for k in range(n)]
            weights = timing.digest_weights(timing.DIGEST_ELEMENTS, a, b, "cpu")
            digest = timing.BatchDigest(n * math.prod(self.reference.output_spec(shape, self.dtype)[0]), da, db,
                                        weights, "cpu")
            for k, (i, out, saved) in enumerate(self._saved(candidate, kept, out_bytes, clear=True)):
                self._tampered(saved.tampered, where)
                if out is None:
                    raise Outcome("incorrect", "a call timed by the judge returned no usable output")
                ref = self._perturbed_reference(shape, seeds[k], pa, pb + k)
                _, _, why = self._wrong(out, ref)
                if why:
                    raise Outcome("incorrect", f"the output of a call timed by the judge at {shape_label(shape)} is wrong ({why}): "
                                  "its inputs took fresh values when the clock started")
                digest.add(out)
                del out, ref
                self._give_back()
            digest = digest.value()
            claimed = reply.digest
            if claimed is None or not abs(claimed - digest) <= 1e-6 * (abs(digest) + 1.0):
                raise Outcome("rejected", f"the outputs saved after the calls timed by the judge at {shape_label(shape)} are not "
                              "the ones their reply described when the clock stopped: the answers were computed afterwards")
        result.timing.judge_clock_us = round(min(per_call), 3)
        numel, perturbed_dtype = perturbed
        # each call's share also holds one pass over its perturbed input: timed here, by the judge
        perturb_us = timing.perturbation_us(numel, perturbed_dtype) if cuda and numel and perturbed_dtype else 0.0
        if perturb_us and self.profile is not None:  # a GPU kept busy to slow this timing gains little: at
            # most one pass (read and write) at an eighth of the device's bandwidth, plus its launches
            nbytes = 2 * numel * perturbed_dtype.itemsize
            perturb_us = min(perturb_us, 8e6 * nbytes / self.profile.hbm_bytes_per_s + 20.0)
        self._give_back()
        result.timing.judge_perturb_us = round(perturb_us, 3) if cuda else None
        self._clock_check(result, shape, min(per_call), n, min(pings), graphed, perturb_us)

    def _perturbed_reference(self, shape, seed: int, a: int, b: int) -> torch.Tensor:
        """The reference for a seed's inputs perturbed by the fire's factors (a file problem's made and
        perturbed in its process, which never makes the reference of the inputs as they were made)."""
        if self.remote:
            return self.reference.reference_for(shape, seed, self.dtype, self.device, perturb=(a, b))
        inputs = self.reference.make_inputs(shape, seed, self.device, self.dtype)
        timing.perturb_inputs(inputs, a, b)
        return self.reference.reference(**inputs)

    def _clock_check(self, result: ShapeResult, shape, judge_us: float, n: int, ping_us: float, graphed: bool,
                     perturb_us: float = 0.0) -> None:
        """The reported per-call time against the judge's own: a batch's round trip over its calls is at
        least what a call takes. Replayed from a CUDA graph, a call's share is its GPU time (warm L2, so
        about the reported cold figure or less) plus the perturbation, the round trip and the digest
        spread over the batch. Made eagerly (the CPU, or a candidate no graph can hold), a call's share
        also holds the host's cost of launching it from Python, which the events leave out (the larger of
        the event and synchronised wall-clock figures counts; on the CPU, whose interpreted calls vary
        severalfold on a busy machine, 20x and 50 ms).
        The round trip allowed for is the judge's own ping of the process, capped (a process slowed on
        purpose gains little); the perturbation, what the judge timed it at on its own (`perturb_us`, a
        call's share: one pass over the perturbed input, about twice a memory-bound call's time)."""
        claimed = result.timing.median_us
        overhead = (min(ping_us, 1000.0) + 300.0) / n + 5.0 + perturb_us
        # On a GPU the rejection bound is kept wide (10x, plus a fixed allowance): each call's share of a
        # batch also holds the digest's launches, a few microseconds each, which weigh on a kernel of
        # ~20 us; it catches a misreport by an order of magnitude or more (a patched timer
        # reports ~1 us for a call of milliseconds), and anything past 3x is flagged for a person.
        if graphed:
            limit, flag, what = 10 * claimed + overhead + 200.0, 3 * claimed + overhead, "replayed in a CUDA graph"
        elif self.device == "cuda":
            host = max(claimed, result.timing.sync_wall_us or 0.0)
            limit, flag, what = 10 * host + overhead + 500.0, 3 * host + overhead + 100.0, "made eagerly"
        else:  # the interpreter on a shared CPU: calls vary severalfold; only a gross misreport is caught
            limit, flag, what = 20 * claimed + overhead + 50_000.0, math.inf, "made eagerly"
        with_perturbation = f"; {perturb_us:.1f} us of it the inputs' perturbation, allowed for" if perturb_us else ""
        if judge_us > limit:
            raise Outcome("rejected", f"at {shape_label(shape)} the judge's own clock saw {judge_us:.1f} us per call ({n} calls "
                          f"{what}, back to back, round trip included{with_perturbation}) where the sandbox reported {claimed:.1f} us "
                          "per call: the reported time is not the time the calls take (a timer or its statistics patched?)")
        if self.device == "cuda" and judge_us > flag:
            self.verdict.flags.append(f"at {shape_label(shape)}: {judge_us:.1f} us per call by the judge's clock ({what}, round "
                                      f"trip included{with_perturbation}) against {claimed:.1f} us reported: check the timing")

    def _wall_check(self, result: ShapeResult, shape, wall_us: float) -> None:
        """Event time against the wall clock of a call between two full device synchronisations."""
        event_us = result.timing.median_us
        # the synchronised wall clock also holds the launch overhead (Python, the torch-op monitor,
        # Triton's launcher: tens of us) and two synchronisations: the margins leave honest launchers be
        if wall_us > 5 * event_us + 2000:
            raise Outcome("rejected", f"at {shape_label(shape)} a call takes {wall_us:.0f} us by the wall clock between full "
                          f"device synchronisations but {event_us:.1f} us by its stream's events: work hidden from the clock")
        if wall_us > 3 * event_us + 300:
            self.verdict.flags.append(f"at {shape_label(shape)}: {wall_us:.0f} us by the synchronised wall clock against "
                                      f"{event_us:.1f} us by events: check for work outside the stream")

    def _speed_checks(self, result: ShapeResult, shape) -> None:
        """Physically impossible speed is rejected; a speedup over 10x the strongest baseline flagged."""
        if self.profile and result.latency_us is not None:
            elem = self.dtype.itemsize
            traffic = (self.reference.traffic(shape, elem) if isinstance(self.reference, RemoteFileProblem)
                       else self.spec.traffic(shape, elem))
            result.floor_us = round(traffic.floor_us(self.profile), 4)
            result.roofline_pct = round(100.0 * result.floor_us / result.latency_us, 2) if result.latency_us > 0 else math.inf
            if result.latency_us < FLOOR_MARGIN * result.floor_us:
                raise Outcome("rejected", f"{result.latency_us:.2f} us at {shape_label(shape)} is under the {self.profile.name} "
                              f"roofline floor of {result.floor_us:.2f} us: physically implausible, so suspect")
        if result.speedup and (self.device == "cuda" or self.profile is not None):
            best = min(result.speedup.values())
            if best > SUSPECT_SPEEDUP:
                self.verdict.flags.append(f"{best:.1f}x faster than the strongest baseline at {shape_label(shape)}: "
                                          "suspect, check it")

    def _known_baselines(self, shape) -> dict[str, KnownBaseline]:
        """Figures the request offers for this shape, measured on this kind of GPU with as many calls."""
        gpu = device_label(self.gpu)
        return {k.name: k for k in self.req.known_baselines
                if k.shape == shape and k.gpu == gpu and k.reps == self.reps}

    def _baselines(self, result: ShapeResult, input_sets) -> None:
        remote = self.remote
        offered = self.reference.baseline_names() if remote else self.spec.baselines_module().baselines(self.device)
        known = self._known_baselines(result.shape)
        unknown = sorted(set(self.req.only_baselines) - set(offered))
        if unknown:
            self.verdict.flags.append(f"no baseline named {', '.join(unknown)} here (offered: {', '.join(offered)})")
        wanted = []
        for name in offered:
            if self.req.only_baselines and name not in self.req.only_baselines:
                continue
            if name in known:  # timed by an earlier evaluation on this GPU: reused, and said so
                result.baseline_timings[name] = known[name].timing
                result.baselines[name] = known[name].timing.median_us
                result.baselines_reused[name] = known[name].age_s
                continue
            wanted.append(name)
        if not wanted:
            return
        how = {"reps": self.reps, "warmup": self.warmup, "sync_reps": 5 if self.device == "cuda" else 0,
               "limit_rel": BASELINE_TOLERANCE_FACTOR * self.tolerance.rel}
        if remote:  # timed where the file's code runs, in its fenced process
            outcomes = self.reference.time_baselines(result.shape, input_sets, self.dtype, wanted, **how)
        else:
            ref = self.reference.reference(**input_sets[0])
            outcomes = {name: protocol.BaselineOutcomes.model_validate(
                time_baseline(offered[name], ref, input_sets, self.device, **how)).root for name in wanted}
        for name in wanted:
            outcome = outcomes.get(name) or protocol.BaselineFailed(error="no result")
            if isinstance(outcome, protocol.BaselineDisagrees):
                self.verdict.flags.append(f"baseline {name} disagrees with the reference (rel_err "
                                          f"{outcome.rel:.3g}); left out")
            elif isinstance(outcome, protocol.BaselineFailed):
                self.verdict.flags.append(f"baseline {name} failed: {outcome.error}")
            else:
                result.baseline_timings[name] = _timing(outcome.timing)
                result.baselines[name] = result.baseline_timings[name].median_us

    def _summary(self) -> str:
        if self.req.mode != "full":
            return f"{self.req.mode} passed on {len(self.verdict.shapes)} shape(s)"
        parts = []
        for r in self.verdict.shapes:
            sp = ", ".join(f"{speedup(v)} vs {k}" for k, v in r.speedup.items())
            if not sp and self.req.baselines:  # asked for, none timed: say so where a digest keeps it
                sp = "no baseline could be timed: see the flags"
            parts.append(f"{shape_label(r.shape)}: {r.latency_us:.1f} us" + (f" ({sp})" if sp else ""))
        note = "" if self.verdict.timing_meaningful else " [CPU interpreter: times not meaningful]"
        return "correct on every shape; " + "; ".join(parts) + note


def _missing_fences(facts: dict, device: str) -> list[str]:
    """The fences a sandbox's facts say did not take (the program allowlist matters only on CUDA: on the
    CPU seccomp lets nothing start at all)."""
    wanted = ["seccomp", "landlock", "landlock_reads", "netns", "pid_namespace"]
    if device == "cuda":
        wanted.append("landlock_exec")
    return [k for k in wanted if not facts.get(k)]


def _timing(raw: protocol.TimingFigures) -> Timing:
    stats = timing.summarize(raw.times_us)
    graph = raw.graph_times_us
    return Timing(**{k: round(v, 3) if isinstance(v, float) else v for k, v in stats.items()},
                  graph_median_us=round(timing.summarize(graph)["median_us"], 3) if graph else None,
                  graph_error=raw.graph_error,
                  sync_wall_us=round(statistics.median(raw.sync_wall_us), 3) if raw.sync_wall_us else None)


AWAIT_REQUEST = "--await-request"  # started ahead of need: the request's paths come later, on stdin
CHECK_PROBLEM = "--check-problem"  # a file problem checked (marathon problem), not a candidate judged


CHECK_REPORT_S = 15.0  # of a problem check's time, kept for ending the file's process and reporting


def check_problem(req: ProblemCheck) -> ProblemReport:
    """A file problem as `marathon problem` shows it, found in its fenced process: its sizes and other
    constants, its shape sets (smoke: SMOKE_SHAPES or the small sizes it chose for a CPU; bench: its
    own sizes), the reference run once per shape the device would judge (or the shapes given), and its
    statement. The problem's own failure is the report's `error` (one line with the file's line)."""
    spec = get_problem(req.problem, req.problem_source)
    if spec.source is None:
        raise ShapeError(f"{req.problem} is a built-in problem; marathon problem checks a KernelBench-format file")
    device = Judge._device(req.device)
    dtype_name = req.dtype or spec.dtypes[device]
    if dtype_name not in spec.tolerances:
        raise ShapeError(f"--dtype {dtype_name}: {spec.name} knows {', '.join(spec.tolerances)}")
    given = [spec.shape(s) for s in req.shapes]
    t0 = time.monotonic()
    fence_self_test(device)
    report = ProblemReport(name=spec.name, device=device, dtype=dtype_name, statement=spec.statement)
    with tempfile.TemporaryDirectory(prefix=confinement.scratch_prefix("marathon-problem")) as tmp:
        left = req.timeout_s - (time.monotonic() - t0) - CHECK_REPORT_S
        remote = RemoteFileProblem(spec, device, budget_s=max(1.0, min(settings().problem_timeout_s, left)))
        try:
            remote.start(Path(tmp), settings().sandbox_memory_bytes(device))
            facts = remote.facts(small=spec.chooses_smoke("smoke"))
            report.dimensions, report.constants = facts.sizes, facts.constants
            report.statement = statement(spec.name, spec.source, facts)
            bench = file_shapes(spec, facts, device, None, "bench")[0]
            try:
                smoke, report.chosen = file_shapes(spec, facts, device, None, "smoke")
            except ProblemFailed as exc:
                if device == "cpu" and not given and req.need_smoke:
                    raise
                smoke, report.chosen = [], exc.line
            report.shapes = {"smoke": smoke, "bench": bench}
            used = file_shapes(spec, facts, device, given, None)[0] if given else (bench if device == "cuda" else smoke)
            if req.run_reference:
                report.reference = remote.runs(used, getattr(torch, dtype_name))
            failed = next((c for c in report.reference if c.status != "ok"), None)
            if failed is not None:
                report.error, report.line = failed.error, failed.line
        except ShapeRefused as exc:
            report.bad_request = exc.line
        except ProblemFailed as exc:
            report.error = exc.line
        finally:
            remote.close()
    return report


def likely_device() -> str:
    """The device an "auto" request will get here, asked of NVML only: a judge waiting for its request
    starts no CUDA context, so it never shows as another process on the GPU that the evaluation
    before it is timing on (kernels/evaluator/gpu_quiet.py)."""
    try:
        return "cuda" if torch.cuda._device_count_nvml() > 0 else "cpu"
    except Exception:  # no NVML, or a torch without it: a wrong guess only costs the head start
        return "cpu"


def _await_request() -> tuple[list[str] | None, CandidateProcess, Path]:
    """A judge started ahead of need (kernels/evaluator/evaluate.py JudgePool): it starts its
    candidate process, imports the problems' references, and waits for the one request it will
    judge. Neither process sees the request before this returns it. Returns its argv (None: the
    worker closed the pipe unassigned), the candidate process and its scratch folder."""
    scratch = Path(tempfile.mkdtemp(prefix=confinement.scratch_prefix("marathon-eval")))
    candidate = CandidateProcess(likely_device(), scratch)
    for name in PROBLEM_NAMES:
        get_problem(name).reference_module()  # the baselines' modules wait: FLA's import starts CUDA
    line = sys.stdin.readline()
    return (json.loads(line) if line.strip() else None), candidate, scratch


# What the judge keeps of root's capabilities: CAP_SYS_ADMIN, which its sandboxes need to make their
# PID and network namespaces, and CAP_SETPCAP, with which they empty their bounding sets. Not
# CAP_SYS_PTRACE (the worker's /proc environ and memory), not CAP_DAC_OVERRIDE (other users' files),
# nor the rest; the bounding set too, so nothing it starts gets them back.
JUDGE_CAPABILITIES = (isolation.CAP_SYS_ADMIN, isolation.CAP_SETPCAP)


def judge_capabilities() -> str:
    """The judge's capabilities, for the verdict: "none", their names, or how many."""
    names = isolation.capability_names(isolation.capability_sets().get("CapEff", 0))
    return (", ".join(names) or "none") if len(names) <= 4 else f"{len(names)} capabilities"


def main(argv: list[str]) -> int:
    # first: nothing this process starts may read its memory, environment or command line, and it
    # keeps no capability it does not need
    confinement.make_non_dumpable()
    exit_on_bad_settings("marathon-judge")
    if isolation.capability_sets().get("CapEff", 0) and fence_on("capabilities"):
        isolation.drop_capabilities(keep=JUDGE_CAPABILITIES, no_new_privs=False)
    global SUBREAPER
    SUBREAPER = settings().sandbox_subreaper and isolation.become_subreaper()
    if argv[:1] == [CHECK_PROBLEM]:
        return _check_problem_main(argv[1:])
    prestarted, scratch = None, None
    try:
        if argv[:1] == [AWAIT_REQUEST]:
            argv, prestarted, scratch = _await_request()
            if argv is None:
                return 0
        req = EvalRequest.model_validate_json(Path(argv[0]).read_text())
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference is true fp32
        torch.backends.cudnn.allow_tf32 = False
        try:
            verdict = Judge(req).run(prestarted)
        except EvaluatorError as exc:
            print(f"marathon-judge: {exc}", file=sys.stderr)
            return 3
    finally:
        if prestarted is not None:
            prestarted.close()  # a no-op when the evaluation has closed it
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    tmp = Path(argv[1]).with_suffix(".tmp")
    tmp.write_text(verdict.model_dump_json())
    shutil.move(tmp, argv[1])
    return 0


def _check_problem_main(argv: list[str]) -> int:
    req = ProblemCheck.model_validate_json(Path(argv[0]).read_text())
    try:
        report = check_problem(req)
    except ShapeError as exc:  # the request's own mistake: one line for the caller
        report = ProblemReport(name=req.problem, device=req.device, dtype=req.dtype or "", bad_request=str(exc))
    except EvaluatorError as exc:
        print(f"marathon-judge: {exc}", file=sys.stderr)
        return 3
    tmp = Path(argv[1]).with_suffix(".tmp")
    tmp.write_text(report.model_dump_json())
    shutil.move(tmp, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
