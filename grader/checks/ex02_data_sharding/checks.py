"""Judging exercise 2 from the indices each rank saw, epoch by epoch.

The claims are properties (disjoint, equal, covering, reshuffled alike on every rank), so any
correct sharding passes. Only once a claim fails are the shards compared with what
DistributedSampler would have given (its permutations come from a trusted reference run), to name
the mistake from its signature: which indices are missing, whether shards are identical or merely
overlap, whose permutation a rank sliced.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from grader.checks.ex02_data_sharding.facts import EPOCH_INDICES, PERMUTATIONS, EpochIndices
from grader.engine import RankOutcome
from grader.judge.api import CheckContext, check
from grader.judge.explain import error_messages
from grader.judge.names import HintName

SIZE, BATCH, EPOCHS = 37, 4, 3  # 37 is divisible by no world size: the padding shows
INVALID_RANK = re.compile(r"Invalid rank (-?\d+), rank should be in the interval \[0, (-?\d+)\]")

Shards = list[list[int]]  # shards[r]: the indices rank r saw in one epoch


def sampler_seed(ctx: CheckContext) -> int:
    """The seed make_loader is given, drawn per grading: a loader that ignores it, or orders recorded
    from another grading, cannot pass."""
    return ctx.draw("sampler").randrange(2**31 - 100)


def _sampler_error(ctx: CheckContext, ranks: list[RankOutcome]) -> None:
    """Errors DistributedSampler and DataLoader raise themselves, named from what they say."""
    for outcome in ranks:
        message = error_messages(outcome.error)
        if "mutually exclusive with shuffle" in message:
            raise ctx.fail(
                "shuffle=True on the DataLoader together with a sampler: PyTorch refuses it. "
                "The DistributedSampler shuffles; drop the loader's shuffle",
                hint=HintName("sampler_shuffles"),
            )
        invalid = INVALID_RANK.search(message)
        if invalid:
            rank, replicas = int(invalid[1]), int(invalid[2]) + 1
            swapped = (
                " (rank and num_replicas swapped: DistributedSampler's arguments are (dataset, num_replicas, rank))"
                if (rank, replicas) == (ctx.world_size, outcome.rank)
                else ""
            )
            raise ctx.fail(
                f"on rank {outcome.rank} the DistributedSampler got rank={rank} and "
                f"num_replicas={replicas}; it needs rank={outcome.rank}, "
                f"num_replicas={ctx.world_size}{swapped}",
                hint=HintName("distributed_sampler"),
            )


def require_loader(ctx: CheckContext, ranks: list[EpochIndices]) -> None:
    """Fails with what make_loader returned, or its loader yielded, where that was no loader of the
    dataset's batches (the rank's worker says so instead of tripping over it)."""
    for rank, facts in enumerate(ranks):
        if facts.get("loader_problem"):
            raise ctx.fail(f"on rank {rank}, {facts['loader_problem']}", hint=HintName("distributed_sampler"))


def _epochs(ctx: CheckContext) -> list[Shards]:
    """epochs[e][r]: the indices rank r saw in epoch e. Mistakes that spoil every claim are named first."""
    result = ctx.run(EPOCH_INDICES.name, size=SIZE, batch_size=BATCH, epochs=EPOCHS, seed=sampler_seed(ctx))
    _sampler_error(ctx, result.ranks)
    ranks = ctx.require(result, schema=EpochIndices)
    require_loader(ctx, ranks)
    padded = math.ceil(SIZE / ctx.world_size)
    for rank, facts in enumerate(ranks):
        for epoch, sizes in enumerate(facts["batches"]):
            if any(size != BATCH for size in sizes[:-1]) or (sizes and sizes[-1] > BATCH):
                raise ctx.fail(
                    f"rank {rank}'s loader yields batches of {sorted(set(sizes))} samples in epoch {epoch}, "
                    f"not of batch_size={BATCH} (a last, smaller batch aside)"
                )
        if ctx.world_size > 1 and any(len(seen) >= SIZE for seen in facts["epochs"]):
            raise ctx.fail(
                f"no sampler: rank {rank} iterated over all {SIZE} samples in an epoch; each rank "
                f"should see about {padded}. Use a DistributedSampler",
                hint=HintName("distributed_sampler"),
            )
    return [[facts["epochs"][e] for facts in ranks] for e in range(EPOCHS)]


def _orders(ctx: CheckContext) -> dict[int, list[int]]:
    """DistributedSampler's permutation for each seed the diagnoses may need (seed + epoch + rank)."""
    seed = sampler_seed(ctx)
    seeds = list(range(seed, seed + EPOCHS + ctx.world_size))
    orders = ctx.reference(PERMUTATIONS, size=SIZE, seeds=seeds)["orders"]
    return {int(key): order for key, order in orders.items()}


def sampler_shards(order: list[int], world: int, drop_last: bool = False) -> Shards:
    """What DistributedSampler hands each rank from one permutation: padded by repeating its head
    to a multiple of W (or cut to one, with drop_last), then every W-th index from the rank's own."""
    if drop_last:
        indices = order[: len(order) // world * world]
    else:
        total = math.ceil(len(order) / world) * world
        indices = (order * math.ceil(total / len(order)))[:total]
    return [indices[rank::world] for rank in range(world)]


def _overlap(shards: Shards) -> int:
    counts = Counter(i for shard in shards for i in shard)
    return sum(n - 1 for n in counts.values() if n > 1)


@check("shards_are_disjoint")
def shards_are_disjoint(ctx: CheckContext) -> None:
    world, seed = ctx.world_size, sampler_seed(ctx)
    padding = math.ceil(SIZE / world) * world - SIZE
    for epoch, shards in enumerate(_epochs(ctx)):
        sizes = [len(shard) for shard in shards]
        if len(set(sizes)) != 1:
            raise ctx.fail(
                f"epoch {epoch}: shard sizes differ across ranks ({sizes}); ranks with fewer batches "
                f"would wait forever in a collective (DistributedSampler pads every shard to "
                f"{math.ceil(SIZE / world)})"
            )
        repeated = _overlap(shards)
        if repeated <= padding:
            continue
        if all(shard == shards[0] for shard in shards):
            raise ctx.fail(
                f"epoch {epoch}: every rank got the same shard ({len(shards[0])} samples, in the same "
                "order): the sampler does not know which rank it is on; pass rank=rank (and "
                "num_replicas=world_size)",
                hint=HintName("distributed_sampler"),
            )
        orders = _orders(ctx)
        sliced = [_sliced_seed(shard, rank, orders, world) for rank, shard in enumerate(shards)]
        if sliced == [seed + rank + epoch for rank in range(world)]:
            raise ctx.fail(
                f"epoch {epoch}: shards overlap ({repeated} samples seen twice, the padding allows "
                f"{padding}): rank r took its slice of the permutation for seed {seed} + r, so every "
                "rank drew its own permutation. A rank-dependent seed; use the same seed everywhere",
                hint=HintName("same_seed"),
            )
        found = [own for own in sliced if own is not None]
        if len(found) == len(sliced):  # every rank's shard is the slice of some seed's permutation
            at = ", ".join(f"rank {rank} as in epoch {own - seed}" for rank, own in enumerate(found))
            raise ctx.fail(
                f"epoch {epoch}: shards overlap: the ranks shuffled as in different epochs ({at}): their "
                "samplers are at different epochs; start_epoch must call set_epoch(epoch) on every "
                "rank",
                hint=HintName("set_epoch"),
            )
        raise ctx.fail(
            f"epoch {epoch}: shards overlap: {repeated} samples are seen by more than one rank (the sampler "
            f"pads only {padding}), so the ranks do not slice one common permutation; the seed and "
            "the shuffling must be the same on every rank",
            hint=HintName("same_seed"),
        )


def _sliced_seed(shard: list[int], rank: int, orders: dict[int, list[int]], world: int) -> int | None:
    """The seed whose DistributedSampler permutation this rank's shard is its slice of, if any."""
    return next((seed for seed, order in orders.items() if sampler_shards(order, world)[rank] == shard), None)


def _drop_last_diagnosis(shards: Shards, missing: set[int], order: list[int], world: int) -> str:
    """The drop_last mistakes, recognized from which indices are missing; "" if neither fits."""
    if shards == sampler_shards(order, world, drop_last=True):
        return (
            f"drop_last=True in the DistributedSampler: each rank got {SIZE // world} samples and the tail of "
            f"the shuffled permutation, {sorted(missing)}, went to no rank; leave drop_last=False so that the "
            "sampler pads instead"
        )
    full = sampler_shards(order, world)
    kept = [len(shard) for shard in shards]
    if all(shard == whole[: len(shard)] for shard, whole in zip(shards, full)) and kept != [len(s) for s in full]:
        return (
            f"drop_last=True on the DataLoader: each rank's last, partial batch is dropped (the ranks kept "
            f"{kept[0]} of their {len(full[0])} samples), so {len(missing)} samples are never seen; leave "
            "the loader's drop_last False"
        )
    return ""


@check("shards_cover_dataset")
def shards_cover_dataset(ctx: CheckContext) -> None:
    for epoch, shards in enumerate(_epochs(ctx)):
        missing = set(range(SIZE)) - {i for shard in shards for i in shard}
        if not missing:
            continue
        named = _drop_last_diagnosis(shards, missing, _orders(ctx)[sampler_seed(ctx) + epoch], ctx.world_size)
        if named:
            raise ctx.fail(f"epoch {epoch}: {named}")
        if missing == set(range(SIZE - len(missing), SIZE)):
            raise ctx.fail(
                f"epoch {epoch}: the last {len(missing)} samples of the dataset ({sorted(missing)}) are "
                f"seen by no rank: {SIZE} / W={ctx.world_size} leaves a remainder that contiguous "
                "shards of len // W samples drop; DistributedSampler pads instead",
                hint=HintName("distributed_sampler"),
            )
        example = sorted(missing)[:8]
        raise ctx.fail(
            f"epoch {epoch}: {len(missing)} of {SIZE} samples are seen by no rank (e.g. {example}); every "
            "sample must be in some rank's shard"
        )


def _same_on_all_ranks(per_epoch: list[Shards], epoch: int) -> bool:
    return all(shard == per_epoch[epoch - 1][rank] for rank, shard in enumerate(per_epoch[epoch]))


@check("reshuffles_each_epoch")
def reshuffles_each_epoch(ctx: CheckContext) -> None:
    per_epoch = _epochs(ctx)
    for epoch in range(1, EPOCHS):
        if _same_on_all_ranks(per_epoch, epoch):
            first = per_epoch[0][0]
            if first == sorted(first):
                raise ctx.fail(
                    "the shards are never shuffled: every epoch gives each rank the same sorted indices; "
                    "the sampler should shuffle (its default)",
                    hint=HintName("set_epoch"),
                )
            raise ctx.fail(
                f"forgot set_epoch: epoch {epoch} repeats epoch {epoch - 1}'s order on every rank, so the "
                "sampler's epoch never changed; call loader.sampler.set_epoch(epoch) in start_epoch",
                hint=HintName("set_epoch"),
            )
        stale = [rank for rank, shard in enumerate(per_epoch[epoch]) if shard == per_epoch[epoch - 1][rank]]
        if stale:
            raise ctx.fail(
                f"epoch {epoch}: rank {stale[0]} repeats its order of epoch {epoch - 1} while other ranks "
                "reshuffle: start_epoch must set the epoch on every rank's sampler",
                hint=HintName("set_epoch"),
            )
