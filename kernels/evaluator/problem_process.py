"""The process that runs a file problem's code (kernels/problems/kernelbench.py): the file's module
top level, get_inputs()/get_init_inputs(), Model, and the eager and torch.compile baselines built from
it. A problem file is as untrusted as a candidate (anyone who can start a workflow can send one), so it
runs inside the same fences (kernels/evaluator/fences.py), put up before the file is executed: no
secret in its environment, no other process's /proc, reads only of what Python, torch and the
compilers need, writes only under its scratch folder, no network, no program but the compilers
torch.compile runs, and everything it starts ends with it (its PID namespace).

It decides nothing: it makes the references of seeds' inputs (made here, on the device, from the seed:
the candidate's process makes its own the same way) as files for the judge, answers output shapes,
byte counts and the file's facts (sizes, other constants, small sizes for a CPU,
kernels/problems/kernelbench_facts.py), and times the baselines, as the judge asks on stdin; replies go
back as JSON lines on a pipe, with the run's nonce. An exception the file's own code raised is
answered as the problem's error, in one line with the file's line.

    python -m kernels.evaluator.contained kernels.evaluator.problem_process --reply-fd N"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
import traceback

import torch

from kernels.evaluator import confinement, timing
from kernels.evaluator import fences as sandbox_fences
from kernels.evaluator.timing import time_baseline
from kernels.problems.kernelbench import literal_facts
from kernels.problems.kernelbench_facts import file_facts, is_problems_fault, problem_error, problem_line
from kernels.problems.kernelbench_facts import runs as run_reference
from kernels.problems.kernelbench_runtime import FileReference

ASSIGNMENT_DEFAULTS = {"problem_file": None, "problem_name": None, "param_seed": 0, "device": None, "seccomp": 1,
                       "landlock": 1, "landlock_reads": 1, "landlock_exec": 1, "netns": 1, "drop_capabilities": 1,
                       "writable": "", "readable": "", "toolchain": "torch-compile"}


def _vector_isa_probe_in_process() -> None:
    """torch.compile on the CPU checks that each vector ISA's test library loads by starting a Python
    process (torch/_inductor/cpu_vec_isa.py), which this process may not start: it loads the library
    here instead (a library inductor itself just built, not the problem's)."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return
    if not hasattr(cpu_vec_isa.VecISA, "_probe_load"):
        return

    def probe(self, output_path: str) -> bool:
        try:
            ctypes.CDLL(output_path)
            return True
        except OSError:
            return False
    cpu_vec_isa.VecISA._probe_load = probe


def _paths(joined: str) -> list[str]:
    return [p for p in joined.split(os.pathsep) if p]


class ProblemServer:
    def __init__(self, reference: FileReference, device: str, source: str) -> None:
        self.reference, self.device, self.source = reference, device, source

    def _done(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # nothing of ours held while the candidate runs beside us

    def spec(self, cmd: dict) -> dict:
        dtype = getattr(torch, cmd["dtype"])
        shape, out_dtype = self.reference.output_spec(cmd["shape"], dtype)
        inputs = self.reference.make_inputs(cmd["shape"], 0, "meta", dtype)
        nbytes = sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))
        return {"kind": "spec", "shape": list(shape), "dtype": str(out_dtype).removeprefix("torch."),
                "input_bytes": nbytes}

    def min_bytes(self, cmd: dict) -> dict:
        return {"kind": "min_bytes", "bytes": self.reference.min_bytes(cmd["shape"], int(cmd["elem"]))}

    def _inputs(self, cmd: dict, seed: int) -> dict:
        return self.reference.make_inputs(cmd["shape"], seed, self.device, getattr(torch, cmd["dtype"]))

    def reference_of(self, cmd: dict) -> dict:
        """The reference output for the inputs of a seed (made here, on the device, as the candidate's
        process makes its own), perturbed first when the judge's clock asked for it; saved for the judge."""
        t0 = time.perf_counter()
        inputs = self._inputs(cmd, int(cmd["seed"]))
        if cmd.get("perturb"):
            a, b = cmd["perturb"]
            timing.perturb_inputs(inputs, int(a), int(b))
        if self.device == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        out = self.reference.reference(**inputs)
        del inputs
        torch.save(out.cpu(), cmd["output"])
        del out
        self._done()
        return {"kind": "referenced", "inputs_s": round(t1 - t0, 4), "reference_s": round(time.perf_counter() - t1, 4)}

    def baseline_names(self, cmd: dict) -> dict:
        return {"kind": "baseline_names", "names": list(self.reference.baselines(self.device))}

    def baselines(self, cmd: dict) -> dict:
        input_sets = [self._inputs(cmd, int(seed)) for seed in cmd["seeds"]]
        self.reference.use_shape(cmd["shape"])
        ref = self.reference.reference(**input_sets[0])
        offered = self.reference.baselines(self.device)
        results = {}
        for name in cmd["names"]:
            if name not in offered:
                results[name] = {"kind": "failed", "error": "not offered"}
                continue
            results[name] = time_baseline(offered[name], ref, input_sets, self.device, int(cmd["reps"]),
                                          int(cmd["warmup"]), int(cmd["sync_reps"]), float(cmd["limit_rel"]))
        del input_sets, ref
        self._done()
        return {"kind": "baselines", "results": results}

    def facts(self, cmd: dict) -> dict:
        """Sizes and other constants, and small sizes for a CPU when asked (kernels/problems/kernelbench_facts.py)."""
        syntax = literal_facts(self.reference.name, self.source)
        found = file_facts(self.reference, syntax.dims, syntax.constants, small=bool(cmd.get("small")))
        self._done()
        return {"kind": "facts", "facts": found.model_dump()}

    def runs(self, cmd: dict) -> dict:
        """The reference once per shape, timed, each failure in one line with the file's line."""
        dtype = getattr(torch, cmd.get("dtype", "float32"))
        calls = []
        for shape in cmd["shapes"]:
            calls.append(run_reference(self.reference, {k: int(v) for k, v in shape.items()}, self.device, dtype))
            self._done()
        return {"kind": "runs", "calls": [c.model_dump() for c in calls]}

    def serve(self, stream, reply) -> None:
        handlers = {"spec": self.spec, "min_bytes": self.min_bytes, "reference": self.reference_of,
                    "baseline_names": self.baseline_names, "baselines": self.baselines, "facts": self.facts,
                    "runs": self.runs}
        for line in stream:
            cmd = json.loads(line)
            if cmd.get("op") == "exit":
                return
            handler = handlers.get(cmd.get("op"))
            if handler is None:
                reply({"kind": "error", "error": f"unknown op {cmd.get('op')!r}"})
                continue
            try:
                reply(handler(cmd))
            except Exception as exc:
                reply(failure(self.reference.name, exc))


def failure(name: str, exc: BaseException) -> dict:
    """The reply for an exception: the problem's own error (its code raised it, or the file broke a rule
    of the format) in one line with the file's line, or the process's."""
    detail = traceback.format_exc(limit=8)[-6000:]
    if is_problems_fault(name, exc):
        return {"kind": "problem_error", "error": problem_error(name, exc), "line": problem_line(name, exc),
                "detail": detail}
    return {"kind": "error", "error": detail}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reply-fd", type=int, required=True)
    args = ap.parse_args(argv)
    dumpable_off = confinement.make_non_dumpable()
    channel = os.fdopen(args.reply_fd, "w", buffering=1)
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    assignment = json.loads(line)
    nonce = assignment.get("nonce", "")
    a = argparse.Namespace(**{**ASSIGNMENT_DEFAULTS, **{k: v for k, v in assignment.items() if k != "nonce"}})
    if not (a.problem_file and a.problem_name and a.device):
        print("problem_process: an assignment names the problem file, its name and the device", file=sys.stderr)
        return 2

    def reply(obj: dict) -> None:
        channel.write(json.dumps({**obj, "nonce": nonce}) + "\n")
        channel.flush()

    with open(a.problem_file) as f:
        source = f.read()
    sandbox_fences.start_device(a.device)  # CUDA and Triton start before the fences, as in the candidate's
    if a.device == "cpu":
        _vector_isa_probe_in_process()
    facts = sandbox_fences.put_up(
        a.device, writable=_paths(a.writable), readable=_paths(a.readable), toolchain=a.toolchain,
        netns=bool(a.netns), landlock=bool(a.landlock), landlock_reads=bool(a.landlock_reads),
        landlock_exec=bool(a.landlock_exec), seccomp=bool(a.seccomp), drop_capabilities=bool(a.drop_capabilities))
    facts["non_dumpable"] = dumpable_off
    reply({"kind": "fenced", "fences": facts})
    try:  # the file's own code runs from here on
        reference = FileReference(a.problem_name, source)
        reference.param_seed = int(a.param_seed)
    except Exception as exc:
        reply(failure(a.problem_name, exc))
        return 0
    reply({"kind": "ready"})
    ProblemServer(reference, a.device, source).serve(sys.stdin, reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
