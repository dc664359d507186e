"""What exercise 11's workers report: the schemas checks.py holds each report to (rank side too, beside workers.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired

import numpy as np

from grader.engine.facts import RankFacts, Worker, Workload

Arrays = dict[str, np.ndarray]  # a state dict: tensor name -> values


class Trained(RankFacts):
    """The student's prepared model trained by the grader's loop (`train`)."""

    returned: str  # the type name of what prepare_model returned
    norm_layers: dict[str, str]  # module name -> the type name of each normalization layer
    find_unused_parameters: NotRequired[bool]  # this and below: only when prepare_model returned a DDP model
    static_graph: NotRequired[bool]
    steps: NotRequired[list[Arrays]]  # the plain model's state dict after each step


class Reference(RankFacts):
    """One process on the union batches (`reference`, trusted)."""

    steps: list[Arrays]  # the state dict after each step
    local: list[Arrays]  # per rank, the running statistics its own first batch alone gives


TRAIN = Worker("train", Trained)
REFERENCE = Worker("reference", Reference)


@dataclass(frozen=True)
class Training(Workload):
    """The run every check shares: `size` samples, a per-rank `batch_size`, `steps`, SGD at `lr`."""

    size: int = 96
    batch_size: int = 4
    steps: int = 4
    lr: float = 0.05


WORKLOAD = Training()
