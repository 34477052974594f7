"""RMS normalisation of each row with a learned gain: y = x / sqrt(mean(x^2) + eps) * weight.

A row reduction in the KernelBench format."""
import torch
from torch import nn

batch_size = 8192
dim = 4096

SMOKE_SHAPES = [{"batch_size": 5, "dim": 100}]


class Model(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
