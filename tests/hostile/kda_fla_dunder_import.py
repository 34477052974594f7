"""Banned library through __import__ (no import statement). Defence: __import__ is a banned
builtin. Expected: rejected."""
import torch


def kda(q, k, v, g, beta, scale):
    fla = __import__("fla.ops.kda", fromlist=["chunk_kda"])
    return fla.chunk_kda(q, k, v, g, beta, scale=scale)[0]
