"""The problems: `spec.py` (ProblemSpec and the registry of built-in problems), one folder per
built-in problem (statement, reference, baselines, starter and tuned kernels), and `kernelbench.py`
for a problem given as a KernelBench-format file."""
