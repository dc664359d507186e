"""Rank side of exercise 2: iterate the student's loader for a few epochs, record the indices;
the trusted permutations DistributedSampler draws, for the judge's diagnoses."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import TensorDataset

from grader.engine.rank_runtime import RankContext


def epoch_indices(ctx: RankContext, size: int, batch_size: int, epochs: int, seed: int) -> dict[str, Any]:
    """The dataset holds its own indices, so every batch says exactly which samples it is."""
    ctx.init_group()
    dataset = TensorDataset(torch.arange(size))
    loader = ctx.student("make_loader")(dataset, ctx.rank, ctx.world_size, batch_size, seed)
    start_epoch = ctx.student("start_epoch")
    ctx.facts["sampler"] = type(getattr(loader, "sampler", None)).__name__
    ctx.facts["epochs"] = []
    ctx.facts["batches"] = []
    for epoch in range(epochs):
        start_epoch(loader, epoch)
        batches = [torch.as_tensor(batch[0]).flatten() for batch in loader]
        ctx.facts["epochs"].append([int(i) for batch in batches for i in batch])
        ctx.facts["batches"].append([len(batch) for batch in batches])
    return {}


def permutations(ctx: RankContext, size: int, seeds: list[int]) -> dict[str, Any]:
    """Trusted: the permutation of `size` indices DistributedSampler draws for each seed (its seed
    plus the epoch), with a generator of its own."""
    orders = [torch.randperm(size, generator=torch.Generator().manual_seed(seed)).tolist() for seed in seeds]
    return {"orders": dict(zip(map(str, seeds), orders))}
