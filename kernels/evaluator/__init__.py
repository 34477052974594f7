"""The evaluator: judges one candidate kernel against a problem and returns a Verdict. Its modules run
in four processes, each importing only what its row says (tests/kernels/evaluator/test_evaluator_layers.py checks it):

- the worker's (or the CLI's) process, the front door, torch-free: `evaluate.py` (EvalRequest,
  evaluate(), the pool of warm judges), `confinement.py` (the environment allowlists, non-dumpable, the
  parent-death tie, stale scratch), `verdict.py`, `baseline_cache.py`, `result_record.py`,
  `roofline.py`, `fence_drills.py` (the drills' host side). May import the standard library, pydantic,
  kernels.settings and kernels.problems' torch-free modules; never torch, Triton or Temporal.
- the judge's (`python -m kernels.evaluator.judge`): `judge.py` (inputs, reference, baselines,
  comparison, the verdict), `gpu_quiet.py`, `hostinfo.py`, and `policy.py` (the static check it runs
  before any candidate code), besides the front door's models. May import torch, Triton and the
  problems' references and baselines; never candidate code.
- the sandboxes, each started through `contained.py` as PID 1 of a PID namespace of its own: the
  candidate's (`candidate_process.py`, the only process that runs candidate code) and a file
  problem's (`problem_process.py`, the only one that runs a problem file's code). Their fences:
  `fences.py` (what each may read, write and start, and in which order they go up), `isolation.py`
  (the mechanisms: the one libc loader, the one parent-death setter, namespaces, Landlock, seccomp,
  capabilities) and `seal.py` (the audit hook put on before untrusted code). May import torch, Triton,
  `timing.py` (one timing routine and one comparison for candidates and baselines), `policy.py`,
  `confinement.py` and kernels.problems' runtime; never `judge.py` or `evaluate.py`.
- between the judge and the sandboxes, imported by those three and the only code they share about what
  they say to each other: `protocol.py` (the assignments, the requests, the replies and the record
  lines, typed and bounded, and their framing on the pipes). May import pydantic and the standard
  library only: the candidate's process imports it before any candidate code.
  And `tensor_file.py`, the file format in which outputs and references cross from the sandboxes to the
  judge (written there, read here, with no trust in what was written). May import torch and the
  standard library only.
- data, never imported by the processes above: `fence_probe/` (the self-test's problem and kernel, run
  as a candidate) and `hostile_drills/` (hostile files the fence drills run).

Kept empty: the sandboxes import modules of this package, and importing the package must not pull in
more than each of them needs."""
