"""What exercise 5's workers report: imported by checks.py (judge side); runs on the rank side too.

A step and a forward pass stay plain tables (`dict[str, Any]`): the shared judges that read them
(grader/judge/trajectory.py, samples.py) take them as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from grader.engine.facts import RankFacts, TrainingReplays, Worker, Workload

Arrays = dict[str, np.ndarray]  # a state_dict, or a step's gradients or weights, by parameter name
Batches = list[list[int]]  # dataset indices, micro-batch after micro-batch


class Train(RankFacts):
    """The student's train_accumulate under the step and forward recorders and the grader's all-reduce
    counter (`train`; training.record_training)."""

    parameters: int  # the model's number of parameters
    ddp_wraps: list[dict[str, Any]]  # one empty table per DistributedDataParallel built: only counted
    all_reduces_per_step: list[int]  # passes of the grader's comm hook over the gradients before each step
    no_sync_entries: list[dict[str, Any]]  # one empty table per call of DDP.no_sync: only counted
    initial: Arrays
    start: Arrays  # the weights the first optimizer step started from ({} without a step)
    steps: list[dict[str, Any]]  # training.StepRecorder's steps
    forwards: list[dict[str, Any]]  # training.ForwardRecorder's calls
    returned: str  # the type name of what train_accumulate returned
    final: Arrays  # the weights of the model it returned ({} where that was no module)


class Reference(RankFacts):
    """Trusted (`reference`): one process, one step per k*b*W samples, and the micro-batches of a correct
    loader and of an unshuffled sampler."""

    initial: Arrays
    start: Arrays
    steps: list[dict[str, Any]]  # training.StepRecorder's steps, each with its "part_losses"
    batches: list[Batches]  # per rank, its full micro-batches
    mistaken_batches: dict[str, list[Batches]]  # mistake -> per rank
    micro_batches: int  # full micro-batches per rank
    momentum: float


TRAIN = Worker("train", Train)
REFERENCE = Worker("reference", Reference)
REPLAYS = Worker("replays", TrainingReplays)  # the judge's hypotheses on the shared loop


@dataclass(frozen=True)
class Training(Workload):
    """The training runs of every k: `size` samples, a per-rank micro-batch of `batch_size`, SGD at `lr`."""

    size: int = 151
    batch_size: int = 3
    lr: float = 0.05


WORKLOAD = Training()
