"""One graded answer: what grading writes and item analysis reads (its own module, so neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mark:
    student: str
    version: int
    question: str
    number: int
    response: str
    earned: float
    possible: float
    feedback: str
    picked: tuple[str, ...] = ()
