"""What a check decides (`Verdict`), and what grading a check at one world size reports (`CheckResult`:
that verdict, with the check's identity, time and points). One type travels from the check to grades.jsonl.

A module of its own, below api.py and diagnose.py, so that diagnose can build verdicts without importing
the api that imports it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

Status = Literal["passed", "failed", "error", "skipped"]


@dataclass
class Verdict:
    status: Status
    message: str
    details: str = ""
    hint: int | None = None  # 1-based number of the exercise hint that addresses the mistake
    verbose_details: str = ""  # with the grader's own frames: shown with -v instead of details
    engine_failed: bool = False  # the engine broke, not the code under test (a batch replaces that engine)


RECORD_KEYS = ("exercise", "check", "world_size", "status", "message", "seconds", "points", "max_points",
               "visibility", "details", "hint", "notes", "verbose_details")  # a result's record, in this order


@dataclass(kw_only=True)
class CheckResult(Verdict):
    """The verdict of one check at one world size, as reported and recorded."""

    exercise: str
    check: str
    world_size: int
    seconds: float
    points: float
    max_points: float
    visibility: str
    notes: list[str] = field(default_factory=list)  # warnings beside the verdict (a process left behind...)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_json(self) -> dict:
        """The record grades.jsonl and --json hold; engine_failed is the batch's concern, left out."""
        record = asdict(self)
        return {key: record[key] for key in RECORD_KEYS}
