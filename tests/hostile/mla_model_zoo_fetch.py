"""Fetching and unpickling through a torch utility: torch.utils.model_zoo.load_url downloads a URL
(or copies a file:// path) into torch's hub directory and loads it, e.g. a precomputed answer or a
pickle. Defence: the torch API allowlist (torch.utils is not on it). Expected: rejected ("torch.utils")."""
import torch
from torch.utils import model_zoo


def mla_decode(q, kv, scale):
    table = model_zoo.load_url("file:///tmp/answers.pt", map_location=q.device)
    return table[str(tuple(q.shape))].to(q.dtype)
