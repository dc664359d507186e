"""A worker's name and the schema of the facts it reports: the one handle both sides of the trust boundary use.

An exercise's `facts.py` declares a `Worker` for each of its workers, with a TypedDict of what the worker
reports. The worker (rank side) and the checks (judge side) import the same handle, so mypy sees what
crosses the boundary, and the judge checks every report against the schema before a check reads it
(grader/judge/facts.py): a fact that is missing, of the wrong type or not in the schema fails the check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, NotRequired, TypedDict, TypeVar

F = TypeVar("F")


class RankFacts(TypedDict):
    """What the rank runtime adds to every report (grader/engine/rank_runtime.py); every schema extends it."""

    student_import_calls: NotRequired[dict[str, int]]  # IMPORT_CALLS: a function called at the file's top level
    rendezvous_ranks: NotRequired[list[int] | None]  # RENDEZVOUS_RANKS: what the grader's own store saw
    collective_mismatch: NotRequired[dict[str, Any]]  # collectives.MISMATCH: ranks in different collectives
    tampered: NotRequired[list[str]]  # tamper.TAMPERED: what of the grader's own code the code under test replaced


@dataclass(frozen=True)
class Worker(Generic[F]):
    """`name`: the worker function in the exercise's workers.py; `facts`: the TypedDict it reports."""

    name: str
    facts: type[F]
