"""What grading one submission came to (`SubmissionGrade`): what the batch produces and every report reads.

A module of its own so that the gradebook, the grade log, the class report and the progress display read
grades without importing the batch runner that makes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grader.instructor.tamper_scan import ReviewMark
from grader.judge.verdict import CheckResult


@dataclass
class SubmissionGrade:
    name: str
    results: list[CheckResult]
    seconds: float
    problem: str = ""  # about the submission as a whole: unreadable, out of time
    notes: list[str] = field(default_factory=list)  # what grading it ran into (a sandbox's limit, an unwritten file)
    # what the tamper scan found in the graded files: for instructors only, and never a change of score
    review: tuple[ReviewMark, ...] = ()
    files: list[str] = field(default_factory=list)  # which file was graded for each exercise, and why (intake)

    @property
    def problem_column(self) -> str:
        """What the gradebook's problem column says: the problem, then the notes."""
        return "; ".join(filter(None, [self.problem, *self.notes]))

    @property
    def score(self) -> float:
        return sum(r.points for r in self.results)

    @property
    def max_score(self) -> float:
        return sum(r.max_points for r in self.results)

    def exercise_score(self, exercise_id: str) -> float:
        return sum(r.points for r in self.results if r.exercise == exercise_id)
