"""Item analysis of a graded quiz: how hard each question was, how well it separated strong from weak
students, and which distractors drew answers.

- difficulty: the mean share of the question's points earned (1 = everybody right);
- discrimination: the point-biserial correlation between a question's score and the rest of the
  quiz (the total without that question, so the item is not correlated with itself); below about
  0.2 the question barely separates students, a negative value usually means a flawed key;
- option counts: options are counted by their text, since letters change from version to version; a
  distractor nobody picked (with MINIMUM_STUDENTS answers or more) is marked "replace this distractor":
  it turns a four-option question into a three-option one, and a real misconception should take its place.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grader.quiz.marks import Mark

MINIMUM_STUDENTS = 3
REPLACE = "replace this distractor"


@dataclass(frozen=True)
class ItemStatistics:
    difficulty: float
    discrimination: float | None  # None when too few students or no spread to correlate


def correlation(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r, or None when either series is constant."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    sxx = sum((x - mean_x) ** 2 for x in xs)
    syy = sum((y - mean_y) ** 2 for y in ys)
    if sxx <= 1e-12 or syy <= 1e-12:
        return None
    return sxy / math.sqrt(sxx * syy)


def item_statistics(marks: Sequence[Mark]) -> dict[str, ItemStatistics]:
    totals: dict[tuple[str, int], float] = defaultdict(float)
    by_question: dict[str, list[Mark]] = defaultdict(list)
    for mark in marks:
        totals[(mark.student, mark.version)] += mark.earned
        by_question[mark.question].append(mark)
    statistics = {}
    for question, rows in by_question.items():
        scores = [m.earned / m.possible for m in rows]
        rest = [totals[(m.student, m.version)] - m.earned for m in rows]
        discrimination = correlation(scores, rest) if len(rows) >= MINIMUM_STUDENTS else None
        statistics[question] = ItemStatistics(sum(scores) / len(scores), discrimination)
    return statistics


def option_counts(questions: Sequence[dict[str, Any]], marks: Sequence[Mark]) -> list[list[Any]]:
    """Rows (question, option letter in the bank file, text, correct, chosen, share of the students
    who picked anything, advice) for every option of every choice question."""
    picks: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for mark in marks:
        if mark.picked:
            picks[mark.question].append(mark.picked)
    rows = []
    for entry in questions:
        if "options" not in entry:
            continue
        chosen = picks.get(entry["id"], [])
        for option in sorted(entry["options"], key=lambda o: o.get("source") or o["letter"]):
            count = sum(1 for picked in chosen if option["text"] in picked)
            share = f"{count / len(chosen):.2f}" if chosen else ""
            unpicked = not option["correct"] and count == 0 and len(chosen) >= MINIMUM_STUDENTS
            rows.append(
                [
                    entry["id"],
                    option.get("source") or option["letter"],
                    option["text"],
                    "yes" if option["correct"] else "no",
                    count,
                    share,
                    REPLACE if unpicked else "",
                ]
            )
    return rows
