"""What exercise 12's workers report: the schemas checks.py holds each report to (rank side too, beside workers.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict

import numpy as np

from grader.engine.facts import RankFacts, TrainingReplays, Worker, Workload

Arrays = dict[str, np.ndarray]  # a state dict, or a step's gradients: tensor name -> values

# One dist.all_reduce call (CommRecorder); functional syntax, as `async` cannot name a class field.
Call = TypedDict(
    "Call",
    {
        "step": int,  # the optimizer step it belongs to, from 1
        "numel": int,
        "async": bool,
        "op": str,
        "backward": bool,  # called while backward ran
        "after_backward": bool,
        "ready": int,  # trained gradients accumulated by then
        "time": float,
        "waited": bool,
        "modified": NotRequired[bool],  # this and below: once an asynchronous call's handle is first used
        "waited_ready": NotRequired[int],
        "waited_in_backward": NotRequired[bool],
    },
)


class Hooks(TypedDict):
    """How many hooks of each kind were registered on one parameter."""

    post_accumulate: int
    tensor: int


class Comm(TypedDict):
    """What the grader's watch on the all-reduces saw (CommRecorder)."""

    calls: list[Call]
    order: list[list[str]]  # per step, the parameters in the order their gradients became ready
    registered: dict[str, Hooks]
    frozen_grads: list[str]  # per step: "none" or what the frozen parameter's .grad held
    unwaited: list[list[int]]  # per step, the indices in `calls` of handles not waited for at the step
    sizes: dict[str, int]  # bytes of each parameter
    trained: list[str]  # the parameters that require a gradient, in the model's order


class Step(TypedDict):
    """One optimizer step (grader.rank.training.StepRecorder), without the frozen parameter."""

    grads: Arrays
    no_grad: list[str]
    params: Arrays
    state: dict[str, dict[str, float]]  # per parameter, the norm of each optimizer buffer


class TrainedStep(Step):
    losses: list[float]  # every scalar backward() since the step before


class ReferenceStep(Step):
    part_losses: list[float]  # the mean loss of rank 0's batch at the weights the step starts from


class Trained(RankFacts):
    """The student's train_overlapped under the step recorder and the watch on the all-reduces (`train`)."""

    comm: Comm
    initial: Arrays
    start: Arrays
    steps: list[TrainedStep]
    returned: str  # the type name of what train_overlapped returned
    final: Arrays  # the returned model's weights ({} when it returned no model)
    frozen_moved: NotRequired[float]  # when a step ran: how far the frozen parameter moved


class Reference(RankFacts):
    """One process on the union batches (`reference`, trusted)."""

    initial: Arrays
    start: Arrays
    steps: list[ReferenceStep]
    momentum: float


TRAIN = Worker("train", Trained)
REFERENCE = Worker("reference", Reference)
REPLAYS = Worker("replays", TrainingReplays)  # the judge's hypotheses on the shared loop


@dataclass(frozen=True)
class Run(Workload):
    """The run every check shares: `steps` of a per-rank `batch_size`, SGD at `lr` (the bucket size is the train
    worker's own argument)."""

    steps: int = 4
    batch_size: int = 3
    lr: float = 0.05


WORKLOAD = Run()
