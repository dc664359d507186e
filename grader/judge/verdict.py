"""What a check decides (`Verdict`), and what grading a check at one world size reports (`CheckResult`:
that verdict, with the check's identity, time and points). One type travels from the check to grades.jsonl.

A module of its own, below api.py and diagnose.py, so that diagnose can build verdicts without importing
the api that imports it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from grader.judge.names import HintName, MaybeCause

Status = Literal["passed", "failed", "error", "skipped"]


@dataclass
class Verdict:
    status: Status
    message: str
    details: str = ""
    hint: HintName | None = None  # the name of the exercise's hint that addresses the mistake (catalog.toml)
    verbose_details: str = ""  # with the grader's own frames: shown with -v instead of details
    engine_failed: bool = False  # the engine broke, not the code under test (a batch replaces that engine)
    # the cause named, only where it is proven (a replay of it reproduces the run, or a slip every probe);
    # "" when the message says what was measured and names no cause
    cause: MaybeCause = ""


RECORD_KEYS = (
    "exercise",
    "check",
    "world_size",
    "status",
    "message",
    "seconds",
    "points",
    "max_points",
    "visibility",
    "details",
    "hint",
    "notes",
    "verbose_details",
    "cause",
    "tampered",
)  # a result's record, in this order


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
    hint_number: int | None = None  # the hint as students ask for it: `grader hint <exercise> <number>`
    # what of the grader's own code the ranks found replaced once the code under test had run, one line each
    # ("rank 0: grader.engine.wire.encode was replaced"): the result is marked, its points are the check's
    tampered: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_json(self) -> dict:
        """The record grades.jsonl and --json hold: its "hint" is the number students type; engine_failed is
        the batch's concern, left out."""
        record = {**asdict(self), "hint": self.hint_number}
        return {key: record[key] for key in RECORD_KEYS}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> CheckResult:
        """A result read back from its record (`to_json`); keys it does not know are ignored."""
        known = {key: record[key] for key in RECORD_KEYS if key in record and key not in ("hint", "tampered")}
        return cls(**known, hint_number=record.get("hint"), tampered=tuple(record.get("tampered", ())))
