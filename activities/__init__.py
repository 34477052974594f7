"""Activities: thin Temporal wrappers (registry.py) over plain, testable functions (tools, evaluation,
model, artifacts). Heavy imports live here, never in workflows/."""
