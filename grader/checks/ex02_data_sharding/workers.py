"""Rank side of exercise 2: iterate the student's loader for a few epochs, record the indices."""

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
    for epoch in range(epochs):
        start_epoch(loader, epoch)
        seen = [int(i) for batch in loader for i in torch.as_tensor(batch[0]).flatten()]
        ctx.facts["epochs"].append(seen)
    return {}
