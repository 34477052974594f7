"""The evaluator's own trivial problem, for the fence self-test (kernels/evaluator/judge.py fence_self_test):
y = 2x + 1, in the KernelBench format, so the self-test depends on no problem of the product's."""
import torch
from torch import nn

n = 1000


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * x + 1.0


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
