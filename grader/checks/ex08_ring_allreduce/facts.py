"""What exercise 8's worker reports: imported by workers.py (rank side) and checks.py (judge side)."""

from __future__ import annotations

from typing import NotRequired, TypedDict

import numpy as np

from grader.engine.facts import RankFacts, Worker


class Message(TypedDict):
    """One message sent (a c10d send op): what was sent, where it starts in the tensor being reduced, what that held."""

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


class BuiltIn(TypedDict):
    """One built-in collective the rank ran (not a send or recv)."""

    op: str  # as torch names it: c10d.allreduce_.default, _c10d_functional.all_reduce.default
    kind: str  # all_reduce, all_gather, broadcast...


class Ring(RankFacts):
    collectives: list[BuiltIn]
    calls: list[Call]


RING = Worker("ring", Ring)
