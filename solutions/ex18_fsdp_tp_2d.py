"""Reference solution for exercise 18: 2D parallelism, FSDP2 over the "dp" dimension of a (dp, tp) mesh and
tensor parallelism over "tp"."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

TP = 2  # the size of the "tp" dimension: the ranks that split each block's weights


def build_mesh(world_size: int) -> DeviceMesh:
    """Rows are dp groups, columns tp groups: ranks 2d and 2d+1 split one copy of the weights."""
    device_type = "cuda" if dist.get_backend() == "nccl" else "cpu"
    return init_device_mesh(device_type, (world_size // TP, TP), mesh_dim_names=("dp", "tp"))


def parallelize(model: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """TP inside each block on mesh["tp"], then FSDP over mesh["dp"] per block and at the root (torchtitan's order)."""
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model


def train(
    rank: int,
    world_size: int,
    model: nn.Module,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
) -> nn.Module:
    """Each dp group trains on its own share of every global batch; the two ranks of a tp group on the same."""
    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    mesh = build_mesh(world_size)
    model = parallelize(model.to(device), mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    dp_rank, dp_size = mesh["dp"].get_local_rank(), mesh["dp"].size()
    for inputs, targets in batches:
        optimizer.zero_grad()
        inputs, targets = inputs.chunk(dp_size)[dp_rank], targets.chunk(dp_size)[dp_rank]
        loss = F.mse_loss(model(inputs.to(device)), targets.to(device))
        loss.backward()
        optimizer.step()
    return model
