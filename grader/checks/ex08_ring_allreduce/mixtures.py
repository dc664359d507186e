"""What each element of a wrong all-reduce result is made of, in terms of the ranks' inputs.

A ring's mistakes leave, element by element, simple mixtures of the W inputs: one rank's own
value (never reduced), the sum of some ranks only (a step missing), one rank counted twice (a step
too many), the mean (divided by W), zeros. With random inputs, matching each element against those
few combinations tells exactly what it holds, whatever chunking the code used; consecutive elements
with the same mixture form a run, which is what a message reports.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

RTOL = ATOL = 2e-5  # fp32 sums of a few N(0, 1) values are off by ~1e-6; a wrong mixture by ~1


def candidates(world: int) -> np.ndarray:
    """The mixtures looked for, one per row: every rank counted 0 to W times (0 or 1 beyond four
    ranks, plus one rank twice, so that the table stays small), the mean, W times the sum."""
    counts = range(world + 1) if world <= 4 else (0, 1)
    rows = {tuple(float(c) for c in row) for row in itertools.product(counts, repeat=world)}
    rows |= {tuple(1.0 + (r == twice) for r in range(world)) for twice in range(world)}
    rows |= {(1.0 / world,) * world, (float(world),) * world}
    return np.array(sorted(rows))


@dataclass(frozen=True)
class Run:
    start: int
    stop: int  # exclusive
    mixture: tuple[float, ...] | None  # coefficient per rank; None: no simple mixture of the inputs

    def describe(self, rank: int) -> str:
        if self.stop - self.start > 1:
            return f"elements {self.start}-{self.stop - 1} hold {describe_mixture(self.mixture, rank)}"
        return f"element {self.start} holds {describe_mixture(self.mixture, rank)}"


def describe_mixture(mixture: tuple[float, ...] | None, rank: int) -> str:
    """A mixture in words, from the point of view of `rank` (whose own input it may be)."""
    if mixture is None:
        return "values that are no simple mixture of the ranks' inputs"
    world = len(mixture)
    ones = tuple([1.0] * world)
    if mixture == ones:
        return "the sum"
    if all(c == 0 for c in mixture):
        return "zeros"
    if all(abs(c - 1.0 / world) < 1e-9 for c in mixture):
        return "the mean, not the sum"
    if len(set(mixture)) == 1:
        return f"{mixture[0]:g} times the sum"
    if mixture == tuple(float(r == rank) for r in range(world)):
        return "this rank's own input, never reduced"
    if sorted(mixture) == [0.0] * (world - 1) + [1.0]:
        return f"rank {mixture.index(1.0)}'s input alone"
    if set(mixture) <= {0.0, 1.0}:
        summed = [r for r, c in enumerate(mixture) if c]
        missing = [r for r, c in enumerate(mixture) if not c]
        return f"the sum of ranks {summed} only (ranks {missing} missing)"
    twice = [r for r, c in enumerate(mixture) if c == 2.0]
    if set(mixture) <= {1.0, 2.0}:
        return f"the sum with {' and '.join(f'rank {r}' for r in twice)} counted twice"
    return " + ".join(f"{c:g} x rank {r}" for r, c in enumerate(mixture) if c)


def explain(output: np.ndarray, inputs: np.ndarray) -> list[Run]:
    """Runs of consecutive elements of `output` (flat) and the mixture of `inputs` (W x M) each holds."""
    table = candidates(inputs.shape[0])
    combos = table @ inputs  # (K, M): every candidate mixture at every element
    error = np.abs(combos - output)
    best = np.argmin(error, axis=0)
    fits = error[best, np.arange(output.size)] <= ATOL + RTOL * np.abs(output)
    labels = np.where(fits, best, -1)
    runs, start = [], 0
    for index in range(1, output.size + 1):
        if index == output.size or labels[index] != labels[start]:
            mixture = tuple(table[labels[start]].tolist()) if labels[start] >= 0 else None
            runs.append(Run(start, index, mixture))
            start = index
    return runs
