"""Rank side of exercise 2: iterate the student's loader for a few epochs, record the indices;
the trusted permutations DistributedSampler draws, for the judge's diagnoses. A batch's indices are read only
from a plain list or tuple holding a plain tensor (grader/engine/exact.py): a subclass would answer its own."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import TensorDataset

from grader.engine import exact
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
    if not hasattr(loader, "__iter__") or isinstance(loader, (str, bytes, dict)):
        ctx.facts["loader_problem"] = f"make_loader returned {_what(loader)}, expected a DataLoader"
        return {}
    for epoch in range(epochs):
        start_epoch(loader, epoch)
        batches: list[list[int]] = []
        for batch in loader:
            indices = _indices(batch, size)
            if isinstance(indices, str) or len(batches) > size:
                ctx.facts["loader_problem"] = (
                    f"make_loader's loader yielded {indices}, expected batches of the dataset's samples "
                    "(a DataLoader over `dataset`)"
                    if isinstance(indices, str)
                    else f"make_loader's loader yielded more than {size} batches in an epoch of {size} samples"
                )
                return {}
            batches.append(indices)
        ctx.facts["epochs"].append([i for batch in batches for i in batch])
        ctx.facts["batches"].append([len(batch) for batch in batches])
    return {}


def _what(value: Any) -> str:
    """A value in a few words: its type and its start."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name} ({' '.join(repr(value)[:80].split())})"


def _indices(batch: Any, size: int) -> list[int] | str:
    """The dataset indices one batch holds (a TensorDataset's batch is a list holding one integer
    tensor), or what the batch was instead, in words."""
    items = exact.values(batch, "loader batch") if isinstance(batch, (list, tuple)) else []
    first = items[0] if len(items) == 1 else None
    if not exact.tensor(first, "loader batch") or exact.dtype(first) != torch.int64 or exact.dim(first) > 1:
        return _what(batch)
    indices = [int(i) for i in first.flatten()]
    if any(not 0 <= i < size for i in indices):
        return f"a batch holding {indices[:8]}, not samples of the {size}-sample dataset"
    return indices


def permutations(ctx: RankContext, size: int, seeds: list[int]) -> dict[str, Any]:
    """Trusted: the permutation of `size` indices DistributedSampler draws for each seed (its seed
    plus the epoch), with a generator of its own."""
    orders = [torch.randperm(size, generator=torch.Generator().manual_seed(seed)).tolist() for seed in seeds]
    return {"orders": dict(zip(map(str, seeds), orders))}
