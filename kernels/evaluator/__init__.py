"""The evaluator: judges one candidate kernel against a problem and returns a Verdict.

`evaluate.py` is the torch-free entry (EvalRequest, evaluate()); `judge.py` is the judge process;
`candidate_process.py` is the only process that runs candidate code, inside the fences of
`isolation.py` and the seal of `seal.py` (an audit hook put on before candidate code is imported).
Kept empty: the candidate's process imports modules of this package, and importing the package must
not pull in more than each of them needs."""
