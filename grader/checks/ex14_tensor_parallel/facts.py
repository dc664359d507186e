"""What exercise 14's workers report: imported by workers.py (rank side) and checks.py (judge side).

The ranks report only what the student's code produced (shards, outputs, gradients, collectives); the
weights they were given, the unsplit block's numbers and the replays come from the trusted `reference`
worker, so no number the judge compares against passes through a process that loaded student code.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

import numpy as np

from grader.engine.facts import RankFacts, Worker


class TensorFacts(TypedDict):
    """A value the student's code returned: its type, and for a tensor its shape, dtype and (plain float32
    of a sane size) values, or (DTensor) its placements."""

    type: str
    shape: NotRequired[list[int]]
    dtype: NotRequired[str]
    requires_grad: NotRequired[bool]
    placements: NotRequired[list[str]]
    value: NotRequired[np.ndarray]


class ShardFacts(TypedDict):
    """What shard_mlp returned: a dict's keys and each of w1, b1, w2, b2 (type alone for anything else)."""

    type: str
    keys: NotRequired[list[str]]
    tensors: NotRequired[dict[str, TensorFacts]]


class Collective(TypedDict):
    """One collective op the grader's dispatch mode saw: its kind, the op, the elements this rank put in."""

    kind: str
    op: str
    numel: int


class Passes(RankFacts):
    """Forward and backward on the drawn input: written in order, as far as the student's code got."""

    forward: NotRequired[list[Collective]]
    y: NotRequired[TensorFacts]
    backward: NotRequired[list[Collective]]
    dx: NotRequired[TensorFacts]


class ByHand(Passes):
    """shard_mlp, then tp_mlp_forward forward and backward (`by_hand`)."""

    shards: ShardFacts
    grads: NotRequired[dict[str, TensorFacts]]  # each shard's .grad after backward, by w1, b1, w2, b2


class ParameterFacts(TypedDict):
    """A parameter (or its gradient) after parallelize_mlp: DTensor or plain, and its local shard."""

    dtensor: bool
    placements: NotRequired[list[str]]
    local: TensorFacts


class Parallelized(Passes):
    """parallelize_mlp on the grader's block and a 1-D mesh, then forward and backward (`parallelized`)."""

    returned: str  # the type parallelize_mlp returned
    parameters: NotRequired[dict[str, ParameterFacts]]  # by fc1.weight, fc1.bias, fc2.weight, fc2.bias
    names: NotRequired[list[str]]
    grads: NotRequired[dict[str, ParameterFacts]]


class Replay(TypedDict):
    """One rank's numbers when f and g do what a hypothesis says."""

    y: np.ndarray
    dx: np.ndarray
    grads: dict[str, np.ndarray]  # by w1, b1, w2, b2: a shard the replay gives no gradient has no entry


class Reference(RankFacts):
    """Trusted (`reference`): the weights every rank is given, and the unsplit block's output and gradients
    (y, dx, dw1, db1, dw2, db2)."""

    full: dict[str, np.ndarray]
    unsplit: dict[str, np.ndarray]


class Replays(RankFacts):
    """Trusted (`replays`): each hypothesis of hypotheses.toml replayed, per rank."""

    replays: dict[str, list[Replay]]


BY_HAND = Worker("by_hand", ByHand)
PARALLELIZED = Worker("parallelized", Parallelized)
REFERENCE = Worker("reference", Reference)
REPLAYS = Worker("replays", Replays)
