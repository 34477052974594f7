"""Banned library through importlib: imports FLA's chunk_kda by a computed module name.
Defence: the import allowlist (importlib is not on it). Expected: rejected."""
import torch
import importlib


def kda(q, k, v, g, beta, scale):
    mod = importlib.import_module("fl" + "a.ops.kda")
    return mod.chunk_kda(q, k, v, g, beta, scale=scale)[0]
