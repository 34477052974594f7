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
import os
import resource
import sys
import time
import traceback

import torch

from kernels.evaluator import confinement, protocol, tensor_file, timing
from kernels.evaluator import fences as sandbox_fences
from kernels.evaluator.protocol import (BaselineNamesReply, BaselinesReply, ErrorReply, FactsReply, FencedReply,
                                        MinBytesReply, ProblemErrorReply, ProblemReadyReply, ReferencedReply, RunsReply,
                                        SpecReply)
from kernels.evaluator.timing import time_baseline
from kernels.problems.kernelbench import literal_facts
from kernels.problems.kernelbench_facts import file_facts, is_problems_fault, problem_error, problem_line
from kernels.problems.kernelbench_facts import runs as run_reference
from kernels.problems.kernelbench_runtime import FileReference


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

    def spec(self, cmd: protocol.SpecRequest) -> SpecReply:
        dtype = getattr(torch, cmd.dtype)
        shape, out_dtype = self.reference.output_spec(cmd.shape, dtype)
        inputs = self.reference.make_inputs(cmd.shape, 0, "meta", dtype)
        nbytes = sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))
        numel, perturbed = timing.perturbed_numel(inputs)
        return SpecReply(shape=[int(d) for d in shape], dtype=str(out_dtype).removeprefix("torch."), input_bytes=nbytes,
                         perturbed_numel=numel, perturbed_dtype=str(perturbed).removeprefix("torch.") if perturbed else None)

    def min_bytes(self, cmd: protocol.MinBytesRequest) -> MinBytesReply:
        return MinBytesReply(bytes=self.reference.min_bytes(cmd.shape, cmd.elem))

    def _inputs(self, cmd, seed: int) -> dict:
        return self.reference.make_inputs(cmd.shape, seed, self.device, getattr(torch, cmd.dtype))

    def reference_of(self, cmd: protocol.ReferenceRequest) -> ReferencedReply:
        """The reference output for the inputs of a seed (made here, on the device, as the candidate's
        process makes its own), perturbed first when the judge's clock asked for it; saved for the judge."""
        t0 = time.perf_counter()
        inputs = self._inputs(cmd, cmd.seed)
        if cmd.perturb:
            a, b = cmd.perturb
            timing.perturb_inputs(inputs, a, b)
        widened = self.reference.widen(inputs, cmd.seed) if cmd.widen else []
        if cmd.widen and not widened:  # nothing to widen: nothing to check
            del inputs
            self._done()
            return ReferencedReply(inputs_s=round(time.perf_counter() - t0, 4), reference_s=0.0)
        if self.device == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        out = self.reference.reference(**inputs)
        del inputs
        tensor_file.write(out, cmd.output)  # (a view: its own values only, not its storage)
        del out
        self._done()
        return ReferencedReply(inputs_s=round(t1 - t0, 4), reference_s=round(time.perf_counter() - t1, 4),
                               widened=widened)

    def baseline_names(self, cmd: protocol.BaselineNamesRequest) -> BaselineNamesReply:
        return BaselineNamesReply(names=list(self.reference.baselines(self.device)))

    def baselines(self, cmd: protocol.BaselinesRequest) -> BaselinesReply:
        input_sets = [self._inputs(cmd, seed) for seed in cmd.seeds]
        self.reference.use_shape(cmd.shape)
        ref = self.reference.reference(**input_sets[0])
        offered = self.reference.baselines(self.device)
        results = {}
        for name in cmd.names:
            if name not in offered:
                results[name] = {"kind": "failed", "error": "not offered"}
                continue
            results[name] = time_baseline(offered[name], ref, input_sets, self.device, cmd.reps, cmd.warmup,
                                          cmd.sync_reps, cmd.limit_rel)
        del input_sets, ref
        self._done()
        return BaselinesReply(results=results)

    def facts(self, cmd: protocol.FactsRequest) -> FactsReply:
        """Sizes and other constants, and small sizes for a CPU when asked (kernels/problems/kernelbench_facts.py)."""
        syntax = literal_facts(self.reference.name, self.source)
        found = file_facts(self.reference, syntax.dims, syntax.constants, small=cmd.small)
        self._done()
        return FactsReply(facts=found.model_dump())

    def runs(self, cmd: protocol.RunsRequest) -> RunsReply:
        """The reference once per shape, timed, each failure in one line with the file's line."""
        dtype = getattr(torch, cmd.dtype)
        calls = []
        for shape in cmd.shapes:
            calls.append(run_reference(self.reference, dict(shape), self.device, dtype))
            self._done()
        return RunsReply(calls=[c.model_dump() for c in calls])

    def serve(self, stream, reply) -> None:
        """The judge's requests, a line each (a line that is not one of the protocol's ends the process:
        the judge sent it, and reads the death)."""
        handlers = {"spec": self.spec, "min_bytes": self.min_bytes, "reference": self.reference_of,
                    "baseline_names": self.baseline_names, "baselines": self.baselines, "facts": self.facts,
                    "runs": self.runs}
        for line in stream:
            cmd = protocol.read_request(line, protocol.ProblemRequests)
            if cmd.op == "exit":
                return
            try:
                reply(handlers[cmd.op](cmd))
            except Exception as exc:
                reply(failure(self.reference.name, exc))


def failure(name: str, exc: BaseException) -> ProblemErrorReply | ErrorReply:
    """The reply for an exception: the problem's own error (its code raised it, or the file broke a rule
    of the format) in one line with the file's line, or the process's."""
    detail = traceback.format_exc(limit=8)[-6000:]
    if is_problems_fault(name, exc):
        return ProblemErrorReply(error=problem_error(name, exc), line=problem_line(name, exc), detail=detail)
    return ErrorReply(error=detail)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reply-fd", type=int, required=True)
    args = ap.parse_args(argv)
    dumpable_off = confinement.make_non_dumpable()
    channel = os.fdopen(args.reply_fd, "wb")
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    try:
        a = protocol.read_request(line, protocol.ProblemAssignment)
    except protocol.ValidationError as exc:
        print(f"problem_process: a bad assignment: {protocol.first_error(exc)}", file=sys.stderr)
        return 2
    if a.fsize:  # no file bigger than a reference it could hold, and a log: a disk filler dies of SIGXFSZ
        resource.setrlimit(resource.RLIMIT_FSIZE, (a.fsize, a.fsize))

    def reply(message: protocol.Message) -> None:
        channel.write(protocol.encode_reply(message, a.nonce))
        channel.flush()

    with open(a.problem_file) as f:
        source = f.read()
    sandbox_fences.start_device(a.device)  # CUDA and Triton start before the fences, as in the candidate's
    if a.device == "cpu":
        _vector_isa_probe_in_process()
    facts = sandbox_fences.put_up(
        a.device, writable=_paths(a.writable), readable=_paths(a.readable), toolchain=a.toolchain,
        netns=a.netns, landlock=a.landlock, landlock_reads=a.landlock_reads, landlock_exec=a.landlock_exec,
        seccomp=a.seccomp, drop_capabilities=a.drop_capabilities)
    facts["non_dumpable"] = dumpable_off
    reply(FencedReply(fences=facts))
    try:  # the file's own code runs from here on
        reference = FileReference(a.problem_name, source)
        reference.param_seed = a.param_seed
    except Exception as exc:
        reply(failure(a.problem_name, exc))
        return 0
    reply(ProblemReadyReply())
    ProblemServer(reference, a.device, source).serve(sys.stdin, reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
