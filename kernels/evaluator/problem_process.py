"""The process that runs a file problem's code (kernels/problems/kernelbench.py): the file's module
top level, get_inputs()/get_init_inputs(), Model, and the eager and torch.compile baselines built from
it. A problem file is as untrusted as a candidate (anyone who can start a workflow can send one), so it
runs inside the same fences (kernels/evaluator/fences.py), put up before the file is executed: no
secret in its environment, no other process's /proc, reads only of what Python, torch and the
compilers need, writes only under its scratch folder, no network, no program but the compilers
torch.compile runs, and everything it starts ends with it (its PID namespace).

It decides nothing: it makes inputs and references as files for the judge, answers output shapes and
byte counts, and times the baselines, as the judge asks on stdin; replies go back as JSON lines on a
pipe, with the run's nonce.

    python -m kernels.evaluator.contained kernels.evaluator.problem_process --reply-fd N"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import traceback

import torch

from kernels.evaluator import confinement
from kernels.evaluator import fences as sandbox_fences
from kernels.evaluator.timing import time_baseline
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


def _cpu(values: dict) -> dict:
    return {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in values.items()}


class ProblemServer:
    def __init__(self, reference: FileReference, device: str) -> None:
        self.reference, self.device = reference, device

    def _done(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # nothing of ours held while the candidate runs beside us

    def spec(self, cmd: dict) -> dict:
        shape, dtype = self.reference.output_spec(cmd["shape"], getattr(torch, cmd["dtype"]))
        return {"kind": "spec", "shape": list(shape), "dtype": str(dtype).removeprefix("torch.")}

    def min_bytes(self, cmd: dict) -> dict:
        return {"kind": "min_bytes", "bytes": self.reference.min_bytes(cmd["shape"], int(cmd["elem"]))}

    def make(self, cmd: dict) -> dict:
        inputs = self.reference.make_inputs(cmd["shape"], int(cmd["seed"]), self.device, getattr(torch, cmd["dtype"]))
        torch.save(_cpu(inputs), cmd["inputs"])
        if cmd.get("reference"):
            torch.save(self.reference.reference(**inputs).cpu(), cmd["reference"])
        del inputs
        self._done()
        return {"kind": "made"}

    def reference_of(self, cmd: dict) -> dict:
        inputs = torch.load(cmd["inputs"], map_location=self.device, weights_only=True)
        self.reference.use_shape(cmd["shape"])
        torch.save(self.reference.reference(**inputs).cpu(), cmd["output"])
        del inputs
        self._done()
        return {"kind": "referenced"}

    def baseline_names(self, cmd: dict) -> dict:
        return {"kind": "baseline_names", "names": list(self.reference.baselines(self.device))}

    def baselines(self, cmd: dict) -> dict:
        input_sets = [torch.load(p, map_location=self.device, weights_only=True) for p in cmd["inputs"]]
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

    def serve(self, stream, reply) -> None:
        handlers = {"spec": self.spec, "min_bytes": self.min_bytes, "make": self.make, "reference": self.reference_of,
                    "baseline_names": self.baseline_names, "baselines": self.baselines}
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
            except Exception:
                reply({"kind": "error", "error": traceback.format_exc(limit=8)[-6000:]})


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
    except BaseException:
        reply({"kind": "error", "error": traceback.format_exc(limit=8)[-6000:]})
        return 0
    reply({"kind": "ready"})
    ProblemServer(reference, a.device).serve(sys.stdin, reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
