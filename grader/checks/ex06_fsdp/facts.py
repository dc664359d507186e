"""What exercise 6's workers report: imported by checks.py (judge side); runs on the rank side too.

A recorded step stays a plain table (`dict[str, Any]`): the shared judge that joins and reads them
(grader/judge/trajectory.py) takes them as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import numpy as np

from grader.engine.facts import RankFacts, TrainingReplays, Worker, Workload

Arrays = dict[str, np.ndarray]  # a state_dict, or a step's gradients or weights, by parameter name


class Mesh(TypedDict):
    """One DeviceMesh built on the rank, in order (the student's own first)."""

    device_type: str
    size: int | None  # its number of ranks, where it could be read


class Held(TypedDict):
    """What this rank holds of one parameter."""

    name: str
    local: int  # elements held here
    full: int  # elements of the whole parameter
    rows: int  # its first dimension
    itemsize: int


class Unit(TypedDict):
    """One FSDP unit: the parameters gathered and freed together."""

    name: str
    params: list[Held]


class Entry(TypedDict):
    """One value of the state dict train_fsdp returned."""

    key: str
    kind: str  # "Tensor", "DTensor", or the type name of another value
    shape: list[int] | None  # None for a value that is no tensor


class Checkpoint(TypedDict):
    """What train_fsdp returned, described on rank 0 (the other ranks report an empty table)."""

    type: NotRequired[str]  # the type name of what it returned
    entries: NotRequired[list[Entry]]  # this and the rest where it returned a dict
    tensors: NotRequired[Arrays]  # its plain tensors
    loads_plain: NotRequired[str]  # the error of loading it into a plain model; "" when it loads


class Train(RankFacts):
    """The student's train_fsdp, then what each rank holds and the weights the grader gathers (`train`). `blocks`,
    `units` and `loose` are measured at every optimizer step, then once train_fsdp returned: a rank that failed
    after its steps keeps those of its last step."""

    meshes: list[Mesh]
    optimizer_steps: list[float]  # per step, the share of the optimizer's parameters that are the model's
    shard_steps: list[dict[str, Any]]  # training.ShardStepRecorder's steps: this rank's flat pieces
    flat_layouts: dict[str, list[tuple[str | None, int]]]  # an FSDP1 flat parameter's (name or padding, numel)
    losses: list[float]  # per forward pass, the loss of this rank's batch
    blocks: int
    units: list[Unit]
    loose: list[Held]  # parameters in no unit, held whole
    checkpoint: Checkpoint
    # the gathered weights on rank 0 ({} on the others); absent where the gather failed, or was not made because a
    # peer had not returned from train_fsdp (RankContext.returned_from)
    final: NotRequired[Arrays]
    gather_error: NotRequired[str]  # why the grader's own gather failed


class Reference(RankFacts):
    """Trusted (`reference`): one process, SGD with momentum, on all ranks' batches of each step."""

    losses: list[float]
    initial: Arrays
    final: Arrays
    steps: list[dict[str, Any]]  # training.StepRecorder's steps
    start: Arrays
    momentum: float


TRAIN = Worker("train", Train)
REFERENCE = Worker("reference", Reference)
REPLAYS = Worker("replays", TrainingReplays)  # the judge's hypotheses on the shared loop


@dataclass(frozen=True)
class Training(Workload):
    """The run every check shares: `steps` (two: the second one uses the momentum buffer), a per-rank `batch_size`, SGD
    at `lr`."""

    steps: int = 2
    batch_size: int = 4
    lr: float = 0.05


WORKLOAD = Training()
