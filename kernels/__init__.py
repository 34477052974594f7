"""The problem library and the evaluator. Knows nothing about Temporal.

Importing this package is cheap: torch and triton are imported only by the judge and the sandbox
processes, never by the orchestrating parent (a CLI or a Temporal worker)."""
