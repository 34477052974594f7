"""Banned library through exec of a string built at run time. Defence: exec and eval are banned
builtins. Expected: rejected."""
import torch


def kda(q, k, v, g, beta, scale):
    scope = {}
    exec("from " + "f" + "la.ops.kda import chunk_kda as impl", scope)
    return scope["impl"](q, k, v, g, beta, scale=scale)[0]
