"""What exercise 2's workers report: imported by checks.py and hidden.py (judge side); runs on the rank side too."""

from __future__ import annotations

from typing import NotRequired

from grader.engine.facts import RankFacts, Worker


class EpochIndices(RankFacts):
    """The student's loader iterated for a few epochs (`epoch_indices`)."""

    sampler: str  # the type name of the loader's sampler ("NoneType" where it has none)
    epochs: list[list[int]]  # epochs[e]: the dataset indices the loader yielded in epoch e, in order
    batches: list[list[int]]  # batches[e]: the size of each batch of epoch e
    loader_problem: NotRequired[str]  # what make_loader returned, or its loader yielded, where it was no loader


class Permutations(RankFacts):
    """Trusted (`permutations`): DistributedSampler's permutation for each seed, keyed by the seed in decimal."""

    orders: dict[str, list[int]]


EPOCH_INDICES = Worker("epoch_indices", EpochIndices)
PERMUTATIONS = Worker("permutations", Permutations)
