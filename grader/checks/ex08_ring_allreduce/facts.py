"""What exercise 8's worker reports: imported by workers.py (rank side) and checks.py (judge side)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

import numpy as np

from grader.engine.facts import RankFacts, Worker


class Message(TypedDict):
    """One ProcessGroup.send: what was sent, where it starts in the tensor being reduced, what that held."""

    values: NotRequired[np.ndarray]
    offset: NotRequired[int | None]
    held: NotRequired[np.ndarray]


class Call(TypedDict):
    """One call of the student's ring_all_reduce on a tensor of the grader's."""

    dtype: str
    shape: list[int]
    output: np.ndarray | None  # the tensor afterwards, while it is still float32
    returned_tensor: bool
    bytes: int  # sent by this rank during the call
    messages: int
    sends: list[Message]


class Ring(RankFacts):
    collectives: dict[str, list[dict[str, Any]]]  # each built-in collective of the process group: its calls
    calls: list[Call]


RING = Worker("ring", Ring)
