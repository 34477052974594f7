"""A workflow's input, decoded by the workflow itself: the workflows started from outside
(KernelOptimization, KernelSuite) take it as a RawValue, so that an input the data converter cannot
read fails the workflow at once instead of its workflow task for ever. Runs inside the workflow."""
from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows import limits


def decode_input(raw: Any, error_type: str, what: str) -> Any:
    """A workflow's input as it arrived (a RawValue: the payload, undecoded), decoded here rather than by
    the data converter: a converter's error (JSON nested past its parser's limit, a payload that is not
    JSON) fails only the workflow task, which Temporal retries for ever while the run shows Running;
    this one fails the workflow at once, non-retryable, naming the input. None: no input was given."""
    if raw is None:
        return None
    payload = raw.payload
    if len(payload.data) > limits.MAX_INPUT_BYTES:
        raise ApplicationError(f"bad {what}: input: {len(payload.data)} bytes, at most {limits.MAX_INPUT_BYTES}",
                               type=error_type, non_retryable=True)
    try:
        return workflow.payload_converter().from_payload(payload)
    except Exception as err:  # the converter's own error, whatever its kind: the input cannot be read
        lines = str(err).splitlines()
        why = next((x.strip().split(" [type=")[0] for x in lines if "Invalid JSON" in x),
                   lines[0] if lines else type(err).__name__)
        raise ApplicationError(f"bad {what}: input: cannot be decoded ({why[:200]})", type=error_type,
                               non_retryable=True) from None
