"""Judging exercise 2 from the indices each rank saw, epoch by epoch."""

from __future__ import annotations

import math
from collections import Counter

from grader.checks.api import CheckContext, check

SIZE, BATCH, EPOCHS, SEED = 37, 4, 3, 17  # 37 is divisible by no world size: the padding shows


def _epochs(ctx: CheckContext) -> list[list[list[int]]]:
    """epochs[e][r]: the indices rank r saw in epoch e. Named mistakes are found first."""
    result = ctx.run("epoch_indices", size=SIZE, batch_size=BATCH, epochs=EPOCHS, seed=SEED)
    for outcome in result.ranks:
        error = outcome.error or {}
        if "mutually exclusive with shuffle" in error.get("message", ""):
            raise ctx.fail("shuffle=True on the DataLoader together with a sampler: PyTorch refuses it. "
                           "The DistributedSampler shuffles; drop the loader's shuffle", hint=4)
    ranks = ctx.require(result)
    per_rank: list[list[list[int]]] = [facts["epochs"] for facts in ranks]
    padded = math.ceil(SIZE / ctx.world_size)
    for rank, epochs in enumerate(per_rank):
        if any(len(seen) >= SIZE for seen in epochs) and ctx.world_size > 1:
            raise ctx.fail(f"no sampler: rank {rank} iterated over all {SIZE} samples in an epoch; each rank "
                           f"should see about {padded}. Use a DistributedSampler", hint=1)
    return [[per_rank[r][e] for r in range(ctx.world_size)] for e in range(EPOCHS)]


def _overlap(shards: list[list[int]]) -> int:
    counts = Counter(i for shard in shards for i in shard)
    return sum(n - 1 for n in counts.values() if n > 1)


@check("shards_are_disjoint")
def shards_are_disjoint(ctx: CheckContext) -> None:
    padded = math.ceil(SIZE / ctx.world_size)
    padding = padded * ctx.world_size - SIZE
    for epoch, shards in enumerate(_epochs(ctx)):
        sizes = [len(shard) for shard in shards]
        if len(set(sizes)) != 1:
            raise ctx.fail(f"epoch {epoch}: shard sizes differ across ranks ({sizes}); ranks with fewer batches "
                           "would wait forever in a collective")
        repeated = _overlap(shards)
        if repeated > padding:
            raise ctx.fail(
                f"epoch {epoch}: shards overlap: {repeated} samples are seen by more than one rank (the sampler "
                f"pads only {padding}). A rank-dependent seed makes every rank draw its own permutation; "
                "use the same seed everywhere", hint=3)


@check("shards_cover_dataset")
def shards_cover_dataset(ctx: CheckContext) -> None:
    for epoch, shards in enumerate(_epochs(ctx)):
        missing = set(range(SIZE)) - {i for shard in shards for i in shard}
        if missing:
            example = sorted(missing)[:8]
            raise ctx.fail(f"epoch {epoch}: {len(missing)} of {SIZE} samples are seen by no rank "
                           f"(e.g. {example}); with a rank-dependent seed the shards stop tiling the dataset",
                           hint=3)


def _same_on_all_ranks(per_epoch: list[list[list[int]]], epoch: int) -> bool:
    return all(shard == per_epoch[epoch - 1][rank] for rank, shard in enumerate(per_epoch[epoch]))


@check("reshuffles_each_epoch")
def reshuffles_each_epoch(ctx: CheckContext) -> None:
    per_epoch = _epochs(ctx)
    for epoch in range(1, EPOCHS):
        if _same_on_all_ranks(per_epoch, epoch):
            first = per_epoch[0][0]
            if first == sorted(first):
                raise ctx.fail("the shards are never shuffled: every epoch gives each rank the same sorted indices; "
                               "the sampler should shuffle (its default)", hint=2)
            raise ctx.fail(f"forgot set_epoch: epoch {epoch} repeats epoch {epoch - 1}'s order on every rank; "
                           "call loader.sampler.set_epoch(epoch) in start_epoch", hint=2)
