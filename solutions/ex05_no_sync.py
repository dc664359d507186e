"""Reference solution for exercise 5: gradient accumulation with DDP's no_sync."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


def train_accumulate(
    rank: int,
    world_size: int,
    model: nn.Module,
    dataset: Dataset,
    batch_size: int,
    accumulation_steps: int,
    lr: float,
) -> nn.Module:
    """Micro-steps 1..k-1 under no_sync (no all-reduce), the k-th synchronizes; one step per group."""
    on_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", rank) if on_gpu else torch.device("cpu")
    model = model.to(device)
    ddp_model = DistributedDataParallel(model, device_ids=[rank] if on_gpu else None)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=lr, momentum=0.9)
    batches = list(loader)
    usable = len(batches) - len(batches) % accumulation_steps  # a trailing partial group makes no step
    optimizer.zero_grad()
    for index, (inputs, targets) in enumerate(batches[:usable]):
        inputs, targets = inputs.to(device), targets.to(device)
        last = (index + 1) % accumulation_steps == 0
        with contextlib.nullcontext() if last else ddp_model.no_sync():
            loss = F.mse_loss(ddp_model(inputs), targets) / accumulation_steps
            loss.backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()
    return model
