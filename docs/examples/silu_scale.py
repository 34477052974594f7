"""SiLU with a learned per-channel scale: y = x * sigmoid(x) * weight, over the last dimension.

An elementwise problem in the KernelBench format: `Model`, the size constants, `get_inputs()` and
`get_init_inputs()`. The evaluator may override the size constants (`--shape batch_size=5,dim=33`)."""
import torch
from torch import nn

batch_size = 4096
dim = 8192

# used on a CPU (the Triton interpreter) when no --shape is given
SMOKE_SHAPES = [{"batch_size": 3, "dim": 70}]


class Model(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x) * self.weight


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
