"""What exercise 9's workers report: the schemas checks.py holds each report to (rank side too, beside workers.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict

import numpy as np

from grader.engine.facts import RankFacts, TrainingReplays, Worker, Workload

Arrays = dict[str, np.ndarray]  # a state dict, or a step's gradients: tensor name -> values


class Saved(TypedDict):
    """torch.save, as grader.rank.write_recorder records it: into a path, an open file or memory."""

    op: Literal["save"]
    path: str | None
    into: Literal["path", "file", "memory"]
    moved_on_before: NotRequired[list[int]]  # rank 0's held save: the ranks that moved on before it began
    start: float
    end: NotRequired[float]  # absent when torch.save never returned


class Loaded(TypedDict):
    op: Literal["load"]
    start: float
    path: str | None
    end: NotRequired[float]


class Written(TypedDict):
    """A file opened for writing."""

    op: Literal["write"]
    path: str
    time: float


class Moved(TypedDict):
    """A file renamed or linked onto `to`."""

    op: Literal["rename", "link"]
    path: str
    to: str
    time: float


class Barrier(TypedDict):
    op: Literal["barrier"]
    name: str  # the function called: barrier, monitored_barrier
    time: float


WriteEvent = Saved | Loaded | Written | Moved | Barrier


class Step(TypedDict):
    """One optimizer step (grader.rank.training.StepRecorder): the gradients it used, the weights after it."""

    grads: Arrays
    no_grad: list[str]
    params: Arrays
    state: dict[str, dict[str, float]]  # per parameter, the norm of each optimizer buffer


class Resumed(RankFacts):
    """Train, save, load into a fresh model, train on (`resume`)."""

    writes: list[WriteEvent]
    host: str
    start: Arrays
    saved_state: Arrays
    save_returned_at: float
    returned_step: int | str  # load_checkpoint's value: an int, else its repr
    loaded_state: Arrays
    momentum_restored: int  # parameters with a momentum buffer after load_checkpoint
    steps: list[Step]


class Reference(RankFacts):
    """The uninterrupted run on one process (`reference`, trusted)."""

    initial: Arrays
    start: Arrays
    steps: list[Step]
    momentum: float


class Checkpoint(RankFacts):
    """The file at the checkpoint path, described by content (`inspect_checkpoint`, trusted)."""

    exists: bool
    problem: NotRequired[str]  # it exists but cannot be read as a dict
    keys: NotRequired[list[str]]
    model: NotRequired[Arrays]  # the entry that is the model's state dict
    model_key: NotRequired[str]
    only_model: NotRequired[bool]  # the file is the model's state dict alone
    optimizer_key: NotRequired[str]
    momentum_buffers: NotRequired[int]
    integers: NotRequired[dict[str, int]]  # its integer entries (a step), by key


RESUME = Worker("resume", Resumed)
REFERENCE = Worker("reference", Reference)
INSPECT_CHECKPOINT = Worker("inspect_checkpoint", Checkpoint)
REPLAYS = Worker("replays", TrainingReplays)  # the judge's hypotheses on the shared loop


@dataclass(frozen=True)
class Training(Workload):
    """The interrupted run and its resume: `size` samples, a per-rank `batch_size`, `steps_before` the save and
    `steps_after` it, SGD at `lr`."""

    size: int = 96
    batch_size: int = 4
    steps_before: int = 3
    steps_after: int = 3
    lr: float = 0.05


WORKLOAD = Training()
