"""Code generation through torch.fx: a graph's call_method nodes name methods by string, so the
generated forward calls x.softmax and reads obj.__getattribute__("__globals__") although no such
attribute appears in the source. Defence: the torch API allowlist (torch.fx is not on it).
Expected: rejected ("torch.fx")."""
import torch
import torch.fx


def _answer(q, kv, scale):
    graph = torch.fx.Graph()
    qf, kvf, s = graph.placeholder("q"), graph.placeholder("kv"), graph.placeholder("scale")
    scores = graph.call_method("__matmul__", (qf, graph.call_method("transpose", (kvf, 1, 2))))
    probs = graph.call_method("softmax", (graph.call_method("__mul__", (scores, s)), -1))
    graph.output(graph.call_method("__matmul__", (probs, kvf)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)(q.float(), kv.float(), scale)


def mla_decode(q, kv, scale):
    return _answer(q, kv, scale)[..., :512].to(q.dtype)
