"""The judge process: generates inputs, computes the reference, runs and times the baselines, and
decides the verdict from what the sandbox reports on its structured channel and from the outputs it
writes. Trusted code only; the candidate runs in the sandbox (kernels.sandbox), never here.

    python -m kernels.judge REQUEST.json VERDICT.json"""
from __future__ import annotations

import ast
import ctypes
import importlib
import json
import math
import os
import platform
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

from kernels import timing
from kernels.evaluator import PROJECT_ROOT, EvalRequest, EvaluatorError, source_sha256
from kernels.policy import check_source, module_violation
from kernels.problem import ProblemSpec, get_problem
from kernels.roofline import profile_for_gpu
from kernels.verdict import Gpu, ShapeResult, Timing, Verdict

SUSPECT_SPEEDUP = 10.0  # over the strongest baseline: flagged, not rejected
FLOOR_MARGIN = 0.9  # a median under 90% of the roofline floor is physically implausible
LOG_TAIL_CHARS = 4000
# Environment variables a candidate may see; everything else (keys, tokens) stays behind.
PASS_ENV_PREFIXES = ("CUDA_", "TRITON_", "NVIDIA_", "LD_LIBRARY_PATH", "PATH", "LANG", "LC_")
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")


class Outcome(Exception):
    """Ends judging early with a status and a reason."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def candidate_env(device: str, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.startswith(PASS_ENV_PREFIXES) and not any(w in k.upper() for w in SECRET_WORDS)}
    env.update({
        "HOME": str(scratch), "TMPDIR": str(scratch), "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT)] + [p for p in sys.path if p and "site-packages" in p]),
        "TRITON_CACHE_DIR": os.environ.get("MARATHON_TRITON_CACHE", str(Path(tempfile.gettempdir()) / "marathon-triton-cache")),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
    })
    env.pop("TRITON_INTERPRET", None)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def _limits(device: str):
    """Runs in the sandbox child before exec: die with the judge, no core dumps, bounded files."""
    def apply() -> None:
        import resource
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 2**30, 16 * 2**30))
        if device == "cpu":  # CUDA maps huge virtual ranges, so address-space limits are CPU-only
            cap = int(os.environ.get("MARATHON_SANDBOX_MEMORY", str(12 * 2**30)))
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return apply


class Sandbox:
    """The candidate's process, its command pipe, its reply channel and its wall-clock budget."""

    def __init__(self, source: str, entry: str, device: str, scratch: Path, budget_s: float) -> None:
        self.scratch = scratch
        self.budget_s = budget_s
        self.log_path = scratch / "candidate.log"
        candidate = scratch / "candidate.py"
        candidate.write_text(source)
        read_fd, write_fd = os.pipe()
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernels.sandbox", "--candidate", str(candidate), "--entry", entry,
             "--device", device, "--reply-fd", str(write_fd)],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, cwd=scratch,
            env=candidate_env(device, scratch), pass_fds=(write_fd,), start_new_session=True,
            preexec_fn=_limits(device))
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, "rb")
        self.buffer = b""

    def send(self, cmd: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the reply wait reports the death

    def receive(self) -> dict:
        """The next reply, charging the wait to the candidate's budget."""
        while b"\n" not in self.buffer:
            if self.budget_s <= 0:
                self.kill()
                raise Outcome("timeout", "the candidate exceeded its wall-clock limit and was killed")
            t0 = time.monotonic()
            ready, _, _ = select.select([self.replies], [], [], min(self.budget_s, 5.0))
            self.budget_s -= time.monotonic() - t0
            if not ready:
                continue
            chunk = os.read(self.replies.fileno(), 1 << 16)
            if not chunk:
                code = self._exit_code()
                raise Outcome("crashed", f"the candidate's process died ({_describe_exit(code)})")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            raise Outcome("crashed", "the candidate's process wrote garbage on the result channel") from None
        if not isinstance(reply, dict) or "kind" not in reply:
            raise Outcome("crashed", "the candidate's process wrote garbage on the result channel")
        return reply

    def request(self, cmd: dict, expect: str) -> dict:
        self.send(cmd)
        reply = self.receive()
        if reply["kind"] == "error":
            status = "compile_error" if reply.get("compile") else "crashed"
            what = "failed to compile" if reply.get("compile") else "raised"
            raise Outcome(status, f"the candidate {what}:\n{reply.get('error', '')}")
        if reply["kind"] != expect:
            raise Outcome("crashed", f"unexpected reply {reply['kind']!r} on the result channel")
        return reply

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
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send({"op": "exit"})
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()  # the whole group: children a candidate forked die too
        self.log.close()
        self.replies.close()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def gpu_info() -> Gpu | None:
    if not torch.cuda.is_available():
        return None
    driver = None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        driver = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return Gpu(name=torch.cuda.get_device_name(), driver=driver)


def compare(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, bool]:
    """(relative L2 error, max abs error, finite) of out against the fp32 reference."""
    out = out.to(ref.device, torch.float32)
    finite = bool(torch.isfinite(out).all())
    if not finite:
        return math.inf, math.inf, False
    diff = out - ref
    rel = (diff.norm() / ref.norm().clamp_min(1e-30)).item()
    return rel, diff.abs().max().item(), True


class Judge:
    def __init__(self, req: EvalRequest) -> None:
        self.req = req
        self.spec: ProblemSpec = get_problem(req.problem)
        self.device = self._device(req.device)
        self.dtype = getattr(torch, self.spec.dtypes[self.device])
        self.tolerance = self.spec.tolerances[self.spec.dtypes[self.device]]
        self.reference = importlib.import_module(f"kernels.{self.spec.name}.reference")
        self.gpu = gpu_info() if self.device == "cuda" else None
        self.profile = profile_for_gpu(self.gpu.name) if self.gpu else None
        cuda = self.device == "cuda"
        self.reps = max(req.reps or (30 if cuda else 3), 20 if cuda else 1)
        self.warmup = req.warmup if req.warmup is not None else (5 if cuda else 1)
        # fresh seeds every evaluation, so no candidate can know its inputs; seed % 3 keeps the cases
        self.seed_base = 3 * secrets.randbelow(2**20)
        self.verdict = Verdict(
            status="ok", reason="", problem=self.spec.name, kernel=req.kernel, mode=req.mode,
            device=self.device, gpu=self.gpu, dtype=self.spec.dtypes[self.device],
            versions={"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()},
            timing_meaningful=cuda, source_sha256=source_sha256(req.source))

    @staticmethod
    def _device(wanted: str) -> str:
        if wanted == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if wanted == "cuda" and not torch.cuda.is_available():
            raise EvaluatorError("--device cuda was asked for, but this host has no usable CUDA GPU")
        if wanted not in ("cpu", "cuda"):
            raise EvaluatorError(f"unknown device {wanted!r}; use auto, cpu or cuda")
        return wanted

    def shapes(self) -> list[dict[str, int]]:
        if self.req.shapes:
            return [self.spec.shape(s) for s in self.req.shapes]
        name = self.req.shape_set or ("bench" if self.device == "cuda" else "smoke")
        return self.spec.shapes(name)

    def run(self) -> Verdict:
        t0 = time.monotonic()
        try:
            try:
                ast.parse(self.req.source)
            except SyntaxError as exc:
                raise Outcome("compile_error", f"syntax error at line {exc.lineno}: {exc.msg}") from None
            violations = check_source(self.req.source, self.spec.entry_point)
            if violations:
                raise Outcome("rejected", "the source breaks the candidate policy:\n" + "\n".join(map(str, violations)))
            with tempfile.TemporaryDirectory(prefix="marathon-eval-") as tmp:
                sandbox = Sandbox(self.req.source, self.spec.entry_point, self.device, Path(tmp), self.req.timeout_s)
                try:
                    self._judge(sandbox, Path(tmp))
                finally:
                    self.verdict.log_tail = sandbox.log_tail()
                    sandbox.close()
        except Outcome as outcome:
            self.verdict.status, self.verdict.reason = outcome.status, outcome.reason
        self.verdict.elapsed_s = round(time.monotonic() - t0, 3)
        if self.verdict.status == "ok" and not self.verdict.reason:
            self.verdict.reason = self._summary()
        return self.verdict

    def _judge(self, sandbox: Sandbox, scratch: Path) -> None:
        ready = self._ready(sandbox)
        if ready["banned_modules"]:
            raise Outcome("rejected", f"importing the candidate loaded {', '.join(ready['banned_modules'])}")
        noop_checked = False
        for index, shape in enumerate(self.shapes()):
            result = ShapeResult(shape=shape, correct=False)
            self.verdict.shapes.append(result)
            out_shape, out_dtype = self.reference.output_spec(shape, self.dtype)
            input_sets, files = [], []
            seeds = 1 if self.req.mode == "compile" else max(self.req.seeds, 1)
            for s in range(seeds):
                inputs = self.reference.make_inputs(shape, self.seed_base + s, self.device, self.dtype)
                path = scratch / f"inputs_{index}_{s}.pt"
                torch.save({k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}, path)
                facts = self._call(sandbox, path, scratch / f"out_{index}_{s}.pt", out_shape, out_dtype, noop=False)
                if self.req.mode == "compile":
                    result.note = "compiled and ran once; not checked"
                    return
                out = torch.load(scratch / f"out_{index}_{s}.pt", weights_only=True)
                ref = self.reference.reference(**inputs)
                rel, max_abs, finite = compare(out, ref)
                result.rel_err = rel if result.rel_err is None else max(result.rel_err, rel)
                result.max_abs_err = max_abs if result.max_abs_err is None else max(result.max_abs_err, max_abs)
                result.seeds = s + 1
                bound = self.tolerance.abs_frac * ref.abs().max().item()
                if not finite or rel > self.tolerance.rel or max_abs > bound:
                    why = "NaN or Inf in the output" if not finite else (
                        f"rel_err {rel:.3g} (limit {self.tolerance.rel:g}), max_abs_err {max_abs:.3g} (limit {bound:.3g})")
                    raise Outcome("incorrect", f"wrong answer at {_fmt(shape)}, seed {self.seed_base + s}: {why}")
                if not noop_checked:
                    self._noop_check(sandbox, path, scratch / f"noop_{index}.pt", out, out_shape, out_dtype)
                    noop_checked = True
                input_sets.append(inputs)
                files.append(str(path))
                del out, ref
            result.correct = True
            if self.req.mode == "full":
                self._time(sandbox, result, shape, input_sets, files)
            sandbox.request({"op": "forget"}, "forgot")
            del input_sets
            if self.device == "cuda":
                torch.cuda.empty_cache()

    def _ready(self, sandbox: Sandbox) -> dict:
        reply = sandbox.receive()
        if reply["kind"] == "error":
            raise Outcome("compile_error", f"the candidate failed to import:\n{reply.get('error', '')}")
        if reply["kind"] != "ready":
            raise Outcome("crashed", f"unexpected reply {reply['kind']!r} on the result channel")
        return reply

    def _call(self, sandbox, path, out_path, out_shape, out_dtype, noop: bool) -> dict:
        facts = sandbox.request({"op": "call", "inputs": str(path), "output": str(out_path), "shape": list(out_shape),
                                 "dtype": str(out_dtype).removeprefix("torch."), "noop": noop}, "called")
        banned = [m for m in facts.get("new_modules", []) if module_violation(m)]
        if banned:
            raise Outcome("rejected", f"calling the candidate loaded {', '.join(banned)}")
        if noop:
            return facts
        self.verdict.kernels_launched = list(dict.fromkeys(self.verdict.kernels_launched + facts["kernels"]))
        if facts["output_problem"]:
            raise Outcome("incorrect", f"the candidate {facts['output_problem']}")
        if facts["torch_ops"]:
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(facts["torch_ops"].items()))
            raise Outcome("rejected", "torch computed part of the answer (" + ops + "); torch may only "
                          "allocate, view, copy and cast: the arithmetic must be in the candidate's Triton kernels")
        own = [k for k in facts["kernels"] if k.startswith("candidate.")]
        foreign = [k for k in facts["kernels"] if not k.startswith("candidate.")]
        if foreign:
            raise Outcome("rejected", f"kernels not defined in the candidate ran: {', '.join(foreign)}")
        if not own:
            raise Outcome("rejected", "no Triton kernel of the candidate's own was launched")
        if facts["inputs_mutated"]:
            raise Outcome("rejected", "the candidate modified its inputs")
        return facts

    def _noop_check(self, sandbox, path, out_path, real_out, out_shape, out_dtype) -> None:
        """With the candidate's kernels turned into no-ops the output must change: otherwise
        something other than its kernels produced the answer."""
        facts = self._call(sandbox, path, out_path, out_shape, out_dtype, noop=True)
        if facts["output_problem"] is not None:
            return  # it could not even build an output without its kernels: fine
        hollow = torch.load(out_path, weights_only=True)
        if torch.equal(hollow.float().nan_to_num(0.0), real_out.float().nan_to_num(0.0)):
            raise Outcome("rejected", "the output did not change with the candidate's Triton kernels disabled: "
                          "the answer does not come from its kernels")

    def _time(self, sandbox, result: ShapeResult, shape, input_sets, files) -> None:
        reply = sandbox.request({"op": "time", "inputs": files, "reps": self.reps, "warmup": self.warmup}, "timed")
        result.timing = _timing(reply)
        result.latency_us = result.timing.median_us
        if self.req.baselines:
            self._baselines(result, input_sets)
        for name, us in result.baselines.items():
            result.speedup[name] = round(us / result.latency_us, 4) if result.latency_us > 0 else math.inf
        if self.profile:
            elem = self.dtype.itemsize
            result.floor_us = round(self.spec.traffic(shape, elem).floor_us(self.profile), 4)
            result.roofline_pct = round(100.0 * result.floor_us / result.latency_us, 2)
            if result.latency_us < FLOOR_MARGIN * result.floor_us:
                raise Outcome("rejected", f"{result.latency_us:.2f} us at {_fmt(shape)} is under the {self.profile.name} "
                              f"roofline floor of {result.floor_us:.2f} us: physically implausible, so suspect")
        if result.speedup and self.device == "cuda":
            best = min(result.speedup.values())
            if best > SUSPECT_SPEEDUP:
                self.verdict.flags.append(f"{best:.1f}x faster than the strongest baseline at {_fmt(shape)}: check it")

    def _baselines(self, result: ShapeResult, input_sets) -> None:
        module = importlib.import_module(f"kernels.{self.spec.name}.baselines")
        ref = self.reference.reference(**input_sets[0])
        for name, fn in module.baselines(self.device).items():
            try:
                with torch.no_grad():
                    rel, _, finite = compare(fn(**input_sets[0]), ref)
                if not finite or rel > self.tolerance.rel:
                    self.verdict.flags.append(f"baseline {name} disagrees with the reference (rel_err {rel:.3g}); left out")
                    continue
                with torch.no_grad():
                    t = timing.time_fn(fn, input_sets, self.device, self.reps, self.warmup)
            except Exception as exc:  # a broken optional baseline is reported, never fatal
                self.verdict.flags.append(f"baseline {name} failed: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            result.baseline_timings[name] = _timing(t)
            result.baselines[name] = result.baseline_timings[name].median_us

    def _summary(self) -> str:
        if self.req.mode != "full":
            return f"{self.req.mode} passed on {len(self.verdict.shapes)} shape(s)"
        parts = []
        for r in self.verdict.shapes:
            sp = ", ".join(f"{v:.2f}x vs {k}" for k, v in r.speedup.items())
            parts.append(f"{_fmt(r.shape)}: {r.latency_us:.1f} us" + (f" ({sp})" if sp else ""))
        note = "" if self.verdict.timing_meaningful else " [CPU interpreter: times not meaningful]"
        return "correct on every shape; " + "; ".join(parts) + note


def _timing(raw: dict) -> Timing:
    stats = timing.summarize(raw["times_us"])
    graph = raw.get("graph_times_us")
    return Timing(**{k: round(v, 3) if isinstance(v, float) else v for k, v in stats.items()},
                  graph_median_us=round(timing.summarize(graph)["median_us"], 3) if graph else None,
                  graph_error=raw.get("graph_error"))


def _fmt(shape: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def main(argv: list[str]) -> int:
    req = EvalRequest.model_validate_json(Path(argv[0]).read_text())
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is true fp32
    torch.backends.cudnn.allow_tf32 = False
    try:
        verdict = Judge(req).run()
    except EvaluatorError as exc:
        print(f"marathon-judge: {exc}", file=sys.stderr)
        return 3
    tmp = Path(argv[1]).with_suffix(".tmp")
    tmp.write_text(verdict.model_dump_json())
    shutil.move(tmp, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
