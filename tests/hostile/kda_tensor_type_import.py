"""A banned library imported by name through a tensor method: Tensor.type("a.dotted.name") imports
the module and looks the name up (torch._utils._import_dotted_name), so FLA's chunk_kda is loaded
without an import statement or __import__. Defence: .type may only be read (device.type), never
called. Expected: rejected ("attribute 'type' called")."""
import torch


def kda(q, k, v, g, beta, scale):
    try:
        q.type("fla.ops.kda.chunk_kda")
    except TypeError:
        pass  # chunk_kda(q.size()) fails, but the module is now loaded
    return torch.zeros_like(v)
