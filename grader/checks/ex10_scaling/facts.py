"""What exercise 10's worker reports: the schema checks.py holds each report to (rank side too, beside workers.py)."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from grader.engine.facts import RankFacts, Worker


class Raised(TypedDict):
    raised: str  # "<type>: <message>" of the exception the call raised


Value = float | str | Raised  # a real number as a float, anything else as its short repr, or what the call raised


class Evaluated(RankFacts):
    """The student's functions on the grader's probes (`evaluate`)."""

    values: dict[str, list[Value]]  # per function named by the check, one value per probe, in the probes' order
    bad_stage: NotRequired[list[Value]]  # zero_memory_per_gpu at each of probes.BAD_ZERO_STAGES, when it is named


EVALUATE = Worker("evaluate", Evaluated)
