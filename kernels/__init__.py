"""The evaluator (kernels/evaluator/) and the problem library (kernels/problems/). Knows nothing
about Temporal.

Importing this package is cheap: torch and triton are imported only by the judge and the candidate's
processes, never by the orchestrating parent (a CLI or a Temporal worker)."""
