"""Reference solution for exercise 3: train with DistributedDataParallel."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


def train_ddp(
    rank: int,
    world_size: int,
    model: nn.Module,
    dataset: Dataset,
    epochs: int,
    batch_size: int,
    lr: float,
    checkpoint_path: str,
) -> nn.Module:
    """DDP training loop; rank 0 saves the plain model's weights, then all ranks meet at a barrier."""
    on_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", rank) if on_gpu else torch.device("cpu")
    model = model.to(device)
    ddp_model = DistributedDataParallel(model, device_ids=[rank] if on_gpu else None)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=lr, momentum=0.9)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = F.mse_loss(ddp_model(inputs), targets)
            loss.backward()
            optimizer.step()
    if rank == 0:
        torch.save(model.state_dict(), checkpoint_path)
    dist.barrier()
    return model
