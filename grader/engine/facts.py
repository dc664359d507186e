"""A worker's name and the schema of the facts it reports: the one handle both sides of the trust boundary use.

An exercise's `facts.py` declares a `Worker` for each of its workers, with a TypedDict of what the worker
reports. The worker (rank side) and the checks (judge side) import the same handle, so mypy sees what
crosses the boundary, and the judge checks every report against the schema before a check reads it
(grader/judge/facts.py): a fact that is missing, of the wrong type or not in the schema fails the check.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final, Generic, NotRequired, TypedDict, TypeVar

import numpy as np

F = TypeVar("F")
REFUSED: Final = "refused"  # the facts key of grader/engine/exact.py's refusals, here where the judge reads it


class RankFacts(TypedDict):
    """What the rank runtime adds to every report (grader/engine/rank_runtime.py); every schema extends it."""

    student_import_calls: NotRequired[dict[str, int]]  # IMPORT_CALLS: a function called at the file's top level
    rendezvous_ranks: NotRequired[list[int] | None]  # RENDEZVOUS_RANKS: what the grader's own store saw
    collective_mismatch: NotRequired[dict[str, Any]]  # collectives.MISMATCH: ranks in different collectives
    tampered: NotRequired[list[str]]  # tamper.TAMPERED: what of the grader's own code the code under test replaced
    refused: NotRequired[list[dict[str, str]]]  # REFUSED: objects of a type the contract does not allow


@dataclass(frozen=True)
class Worker(Generic[F]):
    """`name`: the worker function in the exercise's workers.py; `facts`: the TypedDict it reports."""

    name: str
    facts: type[F]


class ReplayRequest(TypedDict):
    """One hypothesis as the judge asks a trusted replay worker for it (grader/judge/replay.py): the batch
    schedule to replay and the knobs it changes, with the run's numbers already filled in."""

    schedule: str
    mistake: dict[str, Any]


class ReplayedStep(TypedDict):
    """One optimizer step of a replay: the gradient it used and the weights after it, by parameter name."""

    grads: dict[str, np.ndarray]
    params: dict[str, np.ndarray]


class TrainingReplays(RankFacts):
    """What the shared training loop's `replays` worker answers (grader/rank/training.py's replay_all): per
    hypothesis asked, its replayed steps."""

    replays: dict[str, list[ReplayedStep]]


TRAINING_REPLAYS = Worker("replays", TrainingReplays)


@dataclass(frozen=True)
class Workload:
    """The sizes of an exercise's runs (samples, steps, batch, learning rate...), declared once in its facts.py as
    a frozen subclass and passed whole to every worker that runs them: the shared run of two checks is one run
    because both pass the same object, not because two spellings of its arguments agree."""

    def arguments(self) -> dict[str, Any]:
        """The fields as a worker's keyword arguments."""
        return {item.name: getattr(self, item.name) for item in fields(self)}
