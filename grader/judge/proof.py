"""A named cause is a proven cause, by construction.

A verdict names a cause only through a `Proven`, and only the proof path builds one:
- a replay whose facts equal the run's: `replay.prove` for the hypotheses of an exercise's hypotheses.toml,
  `slips.find_slip` for the slips of a function (both call `replayed`);
- a structural replay (`structural`): what the hypothesized mistake builds, built from the reference, equal field
  by field to what the run built (placements, units, shares, state, counts).
Anything else a check finds is an observation: its message says what was measured and names no cause.
tests/test_proof_path.py holds the grader to it: `Proven` is built here only, `replayed` is called by the replay
modules only, and no check hands a verdict a cause any other way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from grader.judge.names import Cause

How = Literal["replay", "structure"]


@dataclass(frozen=True)
class Proven:
    """A cause and how it was proven; `compared`: the fields a structural replay found equal."""

    cause: Cause
    how: How
    compared: tuple[str, ...] = ()


def replayed(cause: Cause) -> Proven:
    """The cause whose replay reproduced the run's numbers (only the replay modules call this: the test says so)."""
    return Proven(cause, "replay")


def _same(built: object, observed: object) -> bool:
    """Exactly equal, through mappings, sequences and arrays: a structure is names, counts and placements, so
    nothing is compared within a tolerance (a float field is a number the structure fixes exactly)."""
    if isinstance(built, Mapping):
        return (
            isinstance(observed, Mapping)
            and built.keys() == observed.keys()
            and all(_same(built[k], observed[k]) for k in built)
        )
    if isinstance(built, np.ndarray) or isinstance(observed, np.ndarray):
        left, right = np.asarray(built), np.asarray(observed)
        return left.shape == right.shape and bool(np.array_equal(left, right))
    if isinstance(built, Sequence) and not isinstance(built, str):
        return (
            isinstance(observed, Sequence)
            and not isinstance(observed, str)
            and len(built) == len(observed)
            and all(_same(b, o) for b, o in zip(built, observed))
        )
    return type(built) is type(observed) and built == observed


def structural(cause: Cause, built: Mapping[str, object], observed: Mapping[str, object]) -> Proven | None:
    """The cause, proven, when what its mistake builds from the reference (`built`) is what the run built
    (`observed`), field by field: the same fields, each exactly equal. None otherwise, or when nothing is compared
    (a signature of one field read alone is not a replay; the caller gives every field the mistake determines)."""
    if not built or built.keys() != observed.keys():
        return None
    if not all(_same(built[name], observed[name]) for name in built):
        return None
    return Proven(cause, "structure", tuple(built))
