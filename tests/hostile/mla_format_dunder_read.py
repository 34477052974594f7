"""Reading through a format string: str.format resolves "{0.attr[key]}" fields itself, so
"{0.__globals__[torch].os.environ}" walks from the candidate's own function to the process
environment with no attribute in the source, and an exception carries it into the verdict.
Defence: .format and .format_map are not on the attribute allowlist (an f-string's fields are
source, checked like any attribute). Expected: rejected ("str.format")."""
import torch
import triton
import triton.language as tl


def _helper():
    return None


def mla_decode(q, kv, scale):
    raise RuntimeError("environment: " + "{0.__globals__[torch].os.environ}".format(_helper))
