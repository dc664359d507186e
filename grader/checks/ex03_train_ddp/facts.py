"""What exercise 3's workers report: imported by checks.py (judge side); runs on the rank side too.

A step, a forward pass and a write event stay plain tables (`dict[str, Any]`): the shared judges that read
them (grader/judge/trajectory.py, samples.py, writes.py) take them as such, and write events come in
several kinds (save, load, write, rename, link, barrier) with keys of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired

import numpy as np

from grader.engine.facts import RankFacts, TrainingReplays, Worker, Workload

Arrays = dict[str, np.ndarray]  # a state_dict, or a step's gradients or weights, by parameter name
Batches = list[list[int]]  # dataset indices, batch after batch


class Train(RankFacts):
    """The student's train_ddp under the step, forward and write recorders (`train`; training.record_training)."""

    ddp_wraps: list[dict[str, Any]]  # one empty table per DistributedDataParallel built: only counted
    writes: list[dict[str, Any]]  # grader.rank.write_recorder's events
    host: str
    returned_at: float  # when train_ddp returned (time.time())
    initial: Arrays
    start: Arrays  # the weights the first optimizer step started from ({} without a step)
    steps: list[dict[str, Any]]  # training.StepRecorder's steps
    forwards: list[dict[str, Any]]  # training.ForwardRecorder's calls
    returned: str  # the type name of what train_ddp returned
    final: Arrays  # the weights of the model it returned ({} where that was no module)


class Reference(RankFacts):
    """Trusted (`reference`): one process on the union of the ranks' batches, and the batches of a correct
    loader and of known data mistakes."""

    initial: Arrays
    start: Arrays
    steps: list[dict[str, Any]]  # training.StepRecorder's steps, each with its "part_losses"
    batches: list[Batches]  # per rank
    mistaken_batches: dict[str, list[Batches]]  # mistake -> per rank
    momentum: float


class Checkpoint(RankFacts):
    """Trusted (`inspect_checkpoint`): the checkpoint file, loaded with weights_only."""

    exists: bool
    problem: NotRequired[str]  # why it cannot be used: there is no more then
    keys: NotRequired[list[str]]
    tensors: NotRequired[Arrays]
    loads_plain: NotRequired[str]  # the error of loading it into a plain model; "" when it loads


TRAIN = Worker("train", Train)
REFERENCE = Worker("reference", Reference)
INSPECT_CHECKPOINT = Worker("inspect_checkpoint", Checkpoint)
REPLAYS = Worker("replays", TrainingReplays)  # the judge's hypotheses on the shared loop


@dataclass(frozen=True)
class Training(Workload):
    """The run every check of exercise 3 shares: `size` samples, `epochs`, a per-rank `batch_size`, SGD at `lr`."""

    size: int = 100
    epochs: int = 2
    batch_size: int = 8
    lr: float = 0.05


WORKLOAD = Training()
