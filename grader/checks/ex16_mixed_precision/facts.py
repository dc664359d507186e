"""What exercise 16's workers report: imported by workers.py (rank side) and checks.py (judge side).

The ranks report what the grader's instrumentation saw of the student's training; every parameter's name
and size (what a rank's shards must add up to), the tensors a plain block keeps and the numbers of one
process doing the same casts come from the trusted `reference` worker; its replays of hypotheses.toml from the
trusted `replays` worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict, final

import numpy as np

from grader.engine.facts import RankFacts, Worker, Workload


class Linear(TypedDict):
    """One nn.Linear forward in the first step: its input's and weight's dtypes, autocast, inside backward."""

    name: str
    input: str
    weight: str
    autocast: bool
    backward: bool


class Collective(TypedDict):
    """One FSDP2 all-gather or reduce-scatter: the dtype and elements sent, at which optimizer step."""

    kind: str
    dtype: str
    numel: int
    step: int


class Stored(TypedDict):
    """What this rank stores of one parameter (original name): DTensor or not, local elements, dtype."""

    name: str
    dtensor: bool
    local: int
    dtype: str


class Unit(TypedDict):
    params: list[str]  # the parameters the FSDP unit gathers (original names)
    param_dtype: str  # its policy's ("None": no casting)


@final  # narrowed by `in`: the first step was seen, or no step was
class OptimizerSeen(TypedDict):
    """At the first optimizer step: the tensors it holds, how many are the model's current parameters, dtypes."""

    held: int
    current: int
    dtypes: list[str]


@final
class NoStep(TypedDict):
    """No optimizer step was taken: nothing seen."""


class Train(RankFacts):
    """The student's train under the grader's watch (`train`). `saved`: per region, the tensors kept for
    backward in the first forward, [count, bytes]. `final` (rank 0; {} elsewhere) or `gather_error`: the
    trained weights as the grader's own gather gave them, or why it could not."""

    linears: list[Linear]
    collectives: list[Collective]
    storage: list[Stored]
    units: dict[str, Unit]
    steps: int
    saved: dict[str, tuple[int, int]]
    optimizer: OptimizerSeen | NoStep
    grads: dict[str, np.ndarray]  # this rank's shard of each gradient at the first step, as float32
    losses: list[float]
    returned: str
    final: NotRequired[dict[str, np.ndarray]]
    gather_error: NotRequired[str]


class Reference(RankFacts):
    """Trusted (`reference`): one process doing FSDP2's casts. `losses[step][rank]`; `first_grads` by label
    (correct, bf16_reduce, fp32_compute, fp16_compute); `saved`: what a plain block keeps, per region;
    `parameters`: each parameter's [elements, rows], what the ranks' shards must make up."""

    losses: list[list[float]]
    final: dict[str, np.ndarray]
    first_grads: dict[str, dict[str, np.ndarray]]
    saved: dict[str, tuple[int, int]]
    parameters: dict[str, tuple[int, int]]


class Replayed(TypedDict):
    """One process's training with a hypothesis' casts: the first step's gradient, each step's loss per rank (as
    the grader's watch measures it) and the weights at the end."""

    first_grads: dict[str, np.ndarray]
    losses: list[list[float]]
    final: dict[str, np.ndarray]


class Replays(RankFacts):
    """Trusted (`replays`): each hypothesis of hypotheses.toml replayed, by cause."""

    replays: dict[str, Replayed]


TRAIN = Worker("train", Train)
REFERENCE = Worker("reference", Reference)
REPLAYS = Worker("replays", Replays)


@dataclass(frozen=True)
class Run(Workload):
    """The run every check shares: `steps` of a per-rank `batch_size`, SGD at `lr`."""

    steps: int = 3
    batch_size: int = 4
    lr: float = 0.05


WORKLOAD = Run()
