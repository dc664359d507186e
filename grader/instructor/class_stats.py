"""The numbers behind the class report, computed from a batch's grades; no HTML here.

Each check result is sorted into one outcome: passed, not attempted (the untouched stub, or the file
missing), timed out (a deadline or the submission's time limit), skipped (the backend was missing),
error, or failed. A diagnosis is a failure's proven cause (`CheckResult.cause`), whatever its message's
wording; a failure whose cause is not proven is known by its message with numbers and paths blurred, so
"the first gradient is 2 times the reference" at W=2 and "4 times" at W=4 count as one mistake. Either
is counted once per submission that made it.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from grader.catalog import Catalog
from grader.instructor.submission_grade import SubmissionGrade
from grader.judge.verdict import CheckResult

NOT_ATTEMPTED_PREFIXES = ("not implemented yet", "file missing")
TIMEOUT_MARKS = ("did not finish within", "used up its time limit")
OUTCOMES = ("passed", "failed", "not attempted", "timed out", "error", "skipped")
SLOWEST_SHOWN = 5


def outcome(result: CheckResult) -> str:
    if result.passed:
        return "passed"
    if result.message.startswith(NOT_ATTEMPTED_PREFIXES):
        return "not attempted"
    if any(mark in result.message for mark in TIMEOUT_MARKS):
        return "timed out"
    if result.status in ("skipped", "error"):
        return result.status
    return "failed"


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0].strip() if lines else "(no message)"


def pattern(message: str) -> str:
    """The message's first line with paths cut to their last part and numbers replaced by '#'."""
    line = re.sub(r"\S*/([^/\s]+)", r"\1", _first_line(message))
    return re.sub(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", line)


@dataclass(frozen=True)
class Bin:
    low: float
    high: float
    count: int


@dataclass(frozen=True)
class PassRate:
    """How a class did on one exercise (check == "") or on one check of it."""

    exercise: str
    check: str
    description: str
    graded: int  # submissions
    counts: dict[str, int]  # outcome -> submissions
    mean_points: float
    max_points: float
    hidden: bool = False  # a hidden check (students never see it)

    @property
    def passed(self) -> int:
        return self.counts.get("passed", 0)

    @property
    def rate(self) -> float:
        return self.passed / self.graded if self.graded else 0.0


@dataclass(frozen=True)
class Diagnosis:
    exercise: str
    check: str
    message: str  # the most frequent wording
    submissions: tuple[str, ...]
    hint: int | None


@dataclass(frozen=True)
class Trouble:
    submission: str
    kind: str  # "timed out" or "error"
    where: str  # an exercise id, or "submission" for the whole
    message: str


@dataclass(frozen=True)
class Review:
    """A line the tamper scan marked in a submission (grader/instructor/tamper_scan.py); its score stands."""

    submission: str
    where: str  # file:line
    reason: str


@dataclass(frozen=True)
class ClassSummary:
    submissions: int
    max_score: float
    scores: tuple[tuple[str, float], ...]  # by name
    histogram: tuple[Bin, ...]
    exercises: tuple[PassRate, ...]
    checks: tuple[PassRate, ...]
    diagnoses: tuple[Diagnosis, ...]
    troubles: tuple[Trouble, ...]
    seconds: tuple[tuple[str, float], ...]  # per submission, slowest first
    exercise_seconds: tuple[tuple[str, float], ...]  # mean per submission, in catalog order
    wall_seconds: float | None  # the batch's own wall time, when one run graded it all
    reviews: tuple[Review, ...] = ()  # by submission, then line

    @property
    def marked(self) -> int:
        """Submissions with a line marked for review."""
        return len({r.submission for r in self.reviews})

    @property
    def mean(self) -> float:
        return statistics.fmean(s for _, s in self.scores) if self.scores else 0.0

    @property
    def median(self) -> float:
        return statistics.median(s for _, s in self.scores) if self.scores else 0.0

    @property
    def full_marks(self) -> int:
        return sum(1 for _, s in self.scores if self.max_score and s >= self.max_score - 1e-9)

    @property
    def zero(self) -> int:
        return sum(1 for _, s in self.scores if s <= 1e-9)

    @property
    def slowest(self) -> tuple[tuple[str, float], ...]:
        return self.seconds[:SLOWEST_SHOWN]

    @property
    def median_seconds(self) -> float:
        return statistics.median(s for _, s in self.seconds) if self.seconds else 0.0


def histogram(scores: Sequence[float], max_score: float) -> tuple[Bin, ...]:
    """About ten bins from 0 to the maximum (one per point when the maximum is under ten)."""
    count = 10 if max_score >= 10 else max(1, math.ceil(max_score))
    width = max_score / count if max_score > 0 else 1.0
    tallies = [0] * count
    for score in scores:
        tallies[min(count - 1, max(0, int(score / width + 1e-9)))] += 1
    return tuple(Bin(i * width, (i + 1) * width, n) for i, n in enumerate(tallies))


def _check_outcome(results: Sequence[CheckResult]) -> str:
    """A check over its world sizes: passed when all passed, else the first other outcome."""
    outcomes = [outcome(r) for r in results]
    return next((o for o in outcomes if o != "passed"), "passed")


def _rates(catalog: Catalog, grades: Sequence[SubmissionGrade]) -> tuple[list[PassRate], list[PassRate]]:
    exercises, checks = [], []
    for exercise in catalog.exercises:
        per_exercise: Counter[str] = Counter()
        points = []
        for grade in grades:
            mine = [r for r in grade.results if r.exercise == exercise.id]
            if mine:
                by_check = [[r for r in mine if r.check == spec.name] for spec in exercise.checks]
                per_exercise[_check_outcome([r for group in by_check for r in group])] += 1
                points.append(sum(r.points for r in mine))
        maximum = max((sum(r.max_points for r in g.results if r.exercise == exercise.id) for g in grades), default=0.0)
        exercises.append(
            PassRate(
                exercise.id,
                "",
                exercise.title,
                sum(per_exercise.values()),
                dict(per_exercise),
                statistics.fmean(points) if points else 0.0,
                maximum,
            )
        )
        for spec in exercise.checks:
            per_check: Counter[str] = Counter()
            check_points = []
            for grade in grades:
                mine = [r for r in grade.results if r.exercise == exercise.id and r.check == spec.name]
                if mine:
                    per_check[_check_outcome(mine)] += 1
                    check_points.append(sum(r.points for r in mine))
            if per_check:
                checks.append(
                    PassRate(
                        exercise.id,
                        spec.name,
                        spec.description,
                        sum(per_check.values()),
                        dict(per_check),
                        statistics.fmean(check_points),
                        spec.points,
                        spec.visibility == "hidden",
                    )
                )
    return exercises, checks


def _is_whole_problem(grade: SubmissionGrade, result: CheckResult) -> bool:
    """The result only repeats what went wrong with the submission as a whole (unreadable, out of time)."""
    return bool(grade.problem) and _first_line(result.message).removeprefix("not run: ") == _first_line(grade.problem)


def _mistake(result: CheckResult) -> tuple[str, str, str, str]:
    """Which mistake a failure is: its check and its proven cause, else its blurred message."""
    return (
        result.exercise,
        result.check,
        *(("cause", result.cause) if result.cause else ("text", pattern(result.message))),
    )


def _diagnoses(grades: Sequence[SubmissionGrade]) -> list[Diagnosis]:
    who: dict[tuple[str, ...], set[str]] = defaultdict(set)
    wording: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
    hints: dict[tuple[str, ...], int | None] = {}
    for grade in grades:
        for result in grade.results:
            if outcome(result) in ("passed", "not attempted", "skipped") or _is_whole_problem(grade, result):
                continue
            key = _mistake(result)
            who[key].add(grade.name)
            wording[key][_first_line(result.message)] += 1
            hints.setdefault(key, result.hint_number)
    found = [
        Diagnosis(key[0], key[1], wording[key].most_common(1)[0][0], tuple(sorted(names)), hints[key])
        for key, names in who.items()
    ]
    return sorted(found, key=lambda d: (-len(d.submissions), d.exercise, d.check, d.message))


def _troubles(grades: Sequence[SubmissionGrade]) -> list[Trouble]:
    troubles = []
    for grade in sorted(grades, key=lambda g: g.name):
        if grade.problem:
            kind = "timed out" if any(m in grade.problem for m in TIMEOUT_MARKS) else "error"
            troubles.append(Trouble(grade.name, kind, "submission", _first_line(grade.problem)))
        seen: set[str] = set()
        for result in grade.results:
            kind = outcome(result)
            if kind in ("timed out", "error") and result.exercise not in seen and not _is_whole_problem(grade, result):
                seen.add(result.exercise)
                troubles.append(Trouble(grade.name, kind, result.exercise, _first_line(result.message)))
    return troubles


def summarize(catalog: Catalog, grades: Sequence[SubmissionGrade], wall_seconds: float | None = None) -> ClassSummary:
    max_score = max((g.max_score for g in grades), default=0.0)
    scores = tuple(sorted((g.name, g.score) for g in grades))
    exercises, checks = _rates(catalog, grades)
    exercise_seconds = tuple(
        (e.id, statistics.fmean([sum(r.seconds for r in g.results if r.exercise == e.id) for g in grades] or [0.0]))
        for e in catalog.exercises
    )
    return ClassSummary(
        submissions=len(grades),
        max_score=max_score,
        scores=scores,
        histogram=histogram([s for _, s in scores], max_score),
        exercises=tuple(exercises),
        checks=tuple(checks),
        diagnoses=tuple(_diagnoses(grades)),
        troubles=tuple(_troubles(grades)),
        seconds=tuple(sorted(((g.name, g.seconds) for g in grades), key=lambda item: -item[1])),
        exercise_seconds=exercise_seconds,
        wall_seconds=wall_seconds,
        reviews=tuple(
            Review(g.name, f"{m.file}:{m.line}", m.reason)
            for g in sorted(grades, key=lambda g: g.name)
            for m in g.review
        ),
    )
