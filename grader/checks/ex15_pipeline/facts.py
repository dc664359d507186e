"""What exercise 15's workers report: imported by workers.py (rank side) and checks.py (judge side).

The probe grids are here, not in workers.py, so that the judge knows which probes a complete report holds
(a report that leaves one out fails) without importing the rank side. The ranks report only what the
student's code did; the single-process run it is compared with comes from the trusted `reference` worker.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict, final

import numpy as np

from grader.engine.facts import RankFacts, TrainingReplays, Worker

SPLIT_GRID = [(5, 2), (5, 4), (7, 4), (8, 4), (4, 4), (9, 2), (10, 3), (3, 2)]  # (num_layers, world_size)
BUBBLE_GRID = [(p, m) for p in (2, 3, 4, 8) for m in (1, 2, 4, 7, 8, 16, 32)]  # (stages, micro_batches)
# what the docstring asks a ValueError for: a rank that is no stage of the pipeline, a schedule of another name
OUTSIDE_RANKS = [(5, 2, -1), (5, 2, 2), (8, 4, 4)]  # (num_layers, world_size, rank)
UNKNOWN_SCHEDULES = [(4, 8, "interleaved")]  # (stages, micro_batches, schedule)
SCHEDULES = ("gpipe", "1f1b")


@final  # a probe gave one of these: `in` tells them apart
class Layers(TypedDict):
    value: list[int]


@final  # a probe gave one of these: `in` tells them apart
class Fraction(TypedDict):
    value: float  # NaN and infinities included: the judge says them as measured


@final  # a probe gave one of these: `in` tells them apart
class Raised(TypedDict):
    error: str  # what the student's function raised or returned instead, in a sentence


class SplitGrid(RankFacts):
    """stage_layers on SPLIT_GRID (`split_grid`): [num_layers, world_size, rank, what it gave]."""

    split: list[tuple[int, int, int, Layers | Raised]]
    outside: list[tuple[int, int, int, Layers | Raised]]  # OUTSIDE_RANKS: each should raise ValueError


class BubbleGrid(RankFacts):
    """bubble_fraction on BUBBLE_GRID x SCHEDULES (`bubble_grid`): [stages, micro_batches, schedule, what it gave]."""

    bubble: list[tuple[int, int, str, Fraction | Raised]]
    unknown: list[tuple[int, int, str, Fraction | Raised]]  # UNKNOWN_SCHEDULES: each should raise ValueError


class StageBuilt(TypedDict):
    """A pipeline stage the student's code built: its index and count, the model's layers and parameters it
    holds (found by value) and how many parameters it holds that are none of the model's."""

    index: int
    count: int
    layers: list[int]
    names: list[str]
    foreign: int


ScheduleBuilt = TypedDict(
    "ScheduleBuilt", {"class": str, "micro_batches": int | None, "loss_fn": bool, "scale_grads": bool}
)  # a schedule the student's code built ("class" is a keyword, hence this form)


class PipeStep(TypedDict):
    """One optimizer step on this rank: gradients before it, weights and the optimizer's buffer norms after."""

    grads: dict[str, np.ndarray]
    no_grad: list[str]
    params: dict[str, np.ndarray]
    state: dict[str, dict[str, float]]


class Train(RankFacts):
    """train_pipeline on the grader's model and batches (`train`). `actions`: [optimizer step, stage,
    F/B/I/W, micro-batch] in the order this rank ran them."""

    stages: list[StageBuilt]
    schedules: list[ScheduleBuilt]
    actions: list[tuple[int, int, str, int]]
    steps: list[PipeStep]
    start: dict[str, np.ndarray]
    returned: str
    returned_names: NotRequired[list[str]]  # when it returned a module: the model's parameters it holds
    returned_foreign: NotRequired[int]


class ValueErrorRaised(TypedDict):
    type: str
    message: str


class Uneven(RankFacts):
    """A batch the micro-batches do not divide (`uneven`): the ValueError raised, or None."""

    raised: ValueErrorRaised | None


class Reference(RankFacts):
    """Trusted (`reference`): one process, the whole model and batch (grader.rank.training.StepRecorder)."""

    initial: dict[str, np.ndarray]
    start: dict[str, np.ndarray]
    steps: list[PipeStep]
    momentum: float


STAGE_LAYERS = Worker("split_grid", SplitGrid)
BUBBLE_FRACTIONS = Worker("bubble_grid", BubbleGrid)
TRAIN = Worker("train", Train)
UNEVEN = Worker("uneven", Uneven)
REFERENCE = Worker("reference", Reference)
REPLAYS = Worker("replays", TrainingReplays)  # the judge's hypotheses on the shared loop
