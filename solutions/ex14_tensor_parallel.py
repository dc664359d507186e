"""Reference solution for exercise 14: an MLP block split column-then-row across the ranks (Megatron's
tensor parallelism), by hand and with parallelize_module."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class CopyToParallel(torch.autograd.Function):
    """f: the identity in forward; in backward, the sum of the ranks' partial input gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()  # all_reduce works in place: never on a tensor autograd may reuse
        dist.all_reduce(grad)
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """g: in forward, the sum of the ranks' partial outputs; the identity in backward."""

    @staticmethod
    def forward(ctx, partial: torch.Tensor) -> torch.Tensor:
        total = partial.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


def shard_mlp(
    rank: int, world_size: int, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor
) -> dict[str, torch.Tensor]:
    """This rank's rows of w1 and b1 (column-parallel), its columns of w2 (row-parallel), and all of b2."""
    rows = w1.shape[0] // world_size
    mine = slice(rank * rows, (rank + 1) * rows)
    return {"w1": w1[mine], "b1": b1[mine], "w2": w2[:, mine], "b2": b2}


def tp_mlp_forward(x: torch.Tensor, shards: dict[str, torch.Tensor]) -> torch.Tensor:
    """The block on this rank's shards: f, the local columns of the hidden layer, the local partial
    output, g, then the second bias once."""
    x = CopyToParallel.apply(x)
    hidden = F.gelu(F.linear(x, shards["w1"], shards["b1"]))  # (batch, hidden / W): no communication
    partial = F.linear(hidden, shards["w2"])  # this rank's share of the output, summed by g
    return ReduceFromParallel.apply(partial) + shards["b2"]


def parallelize_mlp(model: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """fc1 column-wise, fc2 row-wise on the mesh: DTensor inserts f and g."""
    return parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
