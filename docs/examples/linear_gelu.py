"""A linear layer followed by the exact (erf) GELU: y = gelu(x @ W^T + b).

A GEMM with an epilogue in the KernelBench format; its parameters come from nn.Linear."""
import torch
from torch import nn

batch_size = 2048
in_features = 4096
out_features = 4096

SMOKE_SHAPES = [{"batch_size": 5, "in_features": 33, "out_features": 17}]
FLOPS = "2 * batch_size * in_features * out_features"  # for the roofline's compute floor


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
