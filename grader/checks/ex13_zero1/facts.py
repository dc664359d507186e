"""What exercise 13's workers report: the schemas checks.py holds each report to (rank side too, beside workers.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict

import numpy as np

from grader.engine.facts import RankFacts, Worker, Workload

Arrays = dict[str, np.ndarray]  # parameters, or gradients: name -> values


class Partition(TypedDict):
    """partition_parameters on one drawn list of sizes: shards of indices, or what else it returned."""

    sizes: list[int]
    shards: NotRequired[list[list[int]]]  # a list of lists of integer indices
    other: NotRequired[str]  # anything else: its type and a short repr


class Optimizer(TypedDict):
    """One optimizer the student's code stepped."""

    type: str
    params: list[str]  # the parameters it holds, by name ("another tensor" for one that is no parameter)
    state_numel: int  # the elements of its state tensors, shared tensors counted once


class Collective(TypedDict):
    """One collective at the process group."""

    op: str  # the c10d op by its ProcessGroup method name (allreduce, broadcast...) or a functional one (all_reduce)
    bytes: int
    after: int  # the training forward passes before it


class Training(TypedDict):
    """train_zero1 under the grader's instrumentation (ZeroRecorder)."""

    initial: Arrays  # this rank's weights before any broadcast
    snapshots: list[Arrays]  # at each training forward pass, then when train_zero1 returned
    grads: dict[str, Arrays]  # forward number -> the gradients at its first optimizer step
    no_grad: dict[str, list[str]]  # forward number -> the parameters without a gradient then
    owned: dict[str, Arrays]  # forward number -> the values of the parameters an optimizer stepped
    optimizers: list[Optimizer]
    optimizer_steps: int
    comm: list[Collective]
    sizes: dict[str, int]  # parameter -> elements


class Trained(RankFacts):
    """The partitions, then the training (`train`)."""

    partitions: list[Partition]
    partitions_done: bool
    partitions_differ: NotRequired[bool]  # the ranks' partitions disagreed: train_zero1 was not run
    training: NotRequired[Training]  # when train_zero1 was run


class ReferenceStep(TypedDict):
    grads: Arrays
    params: Arrays


class Reference(RankFacts):
    """One process's AdamW on the union batches (`reference`, trusted)."""

    start: Arrays
    steps: list[ReferenceStep]
    smallest_gradient: float  # the smallest magnitude in the first step's gradient


class Replays(RankFacts):
    """The judge's hypotheses simulated on W ranks in one process (`replays`, trusted)."""

    replays: dict[str, list[list[ReferenceStep]]]  # hypothesis (named by the judge) -> per rank, per step


TRAIN = Worker("train", Trained)
REFERENCE = Worker("reference", Reference)
REPLAYS = Worker("replays", Replays)


@dataclass(frozen=True)
class Run(Workload):
    """The run every check shares: `steps` of a per-rank `batch_size`, AdamW at `lr`."""

    steps: int = 10
    batch_size: int = 4
    lr: float = 0.01


WORKLOAD = Run()
