"""What exercise 18's workers report: imported by workers.py (rank side) and checks.py (judge side).

The ranks report what the grader's instrumentation saw of the student's 2D training; every parameter's name
and whole shape (what a rank's local shard is measured against) and the numbers of the single process and its
replays come from the trusted `reference` worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import numpy as np

from grader.engine.facts import RankFacts, Worker, Workload

TP = 2  # the mesh's tp dimension, for the workers and the checks alike; dp = W / 2 ((2, 2) at W=4, (1, 2) at W=2)


class Held(TypedDict):
    """One parameter as this rank holds it after training: its local shape and, for a DTensor, its mesh (the
    ranks, nested as the mesh is), the mesh's dimension names and the placement on each dimension."""

    name: str
    dtensor: bool
    local: list[int]
    mesh: NotRequired[list[Any]]  # open: a mesh of any dimension the student built, as nested lists of ranks
    dims: NotRequired[list[str]]
    placements: NotRequired[list[str]]


class Unit(TypedDict):
    params: list[str]  # the parameters the FSDP unit gathers (original names)
    param_dtype: str


class Train(RankFacts):
    """The student's train under the grader's watch (`train`). `rows`: per forward, the step's samples fed
    (-1: a row not in the batch); `losses`: the loss of each forward on them (None where it could not be
    measured). `final` (rank 0; {} elsewhere) or `gather_error`: the trained weights the grader gathered."""

    rows: list[list[int]]
    losses: list[float | None]
    steps: int
    parameters: list[Held]
    units: dict[str, Unit]
    returned: str
    final: NotRequired[dict[str, np.ndarray]]
    gather_error: NotRequired[str]


class Replayed(TypedDict):
    """One process's training: each step's loss per dp group, and the weights at the end."""

    losses: list[list[float]]
    final: dict[str, np.ndarray]


class Reference(RankFacts):
    """Trusted (`reference`): the correct training and every parameter's whole shape."""

    correct: Replayed
    shapes: dict[str, list[int]]


class Replays(RankFacts):
    """Trusted (`replays`): each hypothesis of hypotheses.toml replayed, by cause."""

    replays: dict[str, Replayed]


TRAIN = Worker("train", Train)
REFERENCE = Worker("reference", Reference)
REPLAYS = Worker("replays", Replays)


@dataclass(frozen=True)
class Run(Workload):
    """The run every check shares: `steps` of a global `batch_size` (6 per dp group at W=4: a loss summed over 6
    samples is not the lr scaled by W = 4), SGD at `lr`."""

    steps: int = 3
    batch_size: int = 12
    lr: float = 0.02


WORKLOAD = Run()
