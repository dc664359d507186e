"""Item analysis of a graded quiz: how hard each question was, how well it separated strong from weak
students, and which distractors drew answers.

- difficulty: the mean share of the question's points earned (1 = everybody right);
- discrimination: the point-biserial correlation between a question's score and the rest of the
  quiz (the total without that question, so the item is not correlated with itself); below about
  0.2 the question barely separates students, a negative value usually means a flawed key;
- option counts: options are counted by their text, since letters change from version to version; a
  distractor nobody picked (with MINIMUM_STUDENTS answers or more) is marked "replace this distractor":
  it turns a four-option question into a three-option one, and a real misconception should take its place;
- flags: what a person should look at before publishing (a likely wrong key, a question that says nothing);
- reliability: Cronbach's alpha of the whole quiz, which is KR-20 when every question is right-or-wrong and
  worth the same: how much of the spread of totals is the students' and not the questions' noise.
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
EASY, HARD = 0.9, 0.3  # difficulty outside [HARD, EASY]: the question tells little about who learned what
WEAK = 0.2  # discrimination below this barely separates strong from weak students


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


def flags(statistics: ItemStatistics | None, students: int) -> list[str]:
    """Why a question deserves a look, from its statistics; nothing with fewer than MINIMUM_STUDENTS."""
    if statistics is None or students < MINIMUM_STUDENTS:
        return []
    found = []
    discrimination = statistics.discrimination
    if discrimination is not None and discrimination < 0:
        found.append(
            f"negative discrimination ({discrimination:.2f}): the weaker students did better on it; "
            "check the key, look for an ambiguous option"
        )
    elif discrimination is not None and discrimination < WEAK:
        found.append(f"discrimination {discrimination:.2f}, below {WEAK}: it barely separates strong from weak")
    if statistics.difficulty > EASY:
        found.append(f"difficulty {statistics.difficulty:.2f}, above {EASY}: nearly everybody got it")
    elif statistics.difficulty < HARD:
        found.append(f"difficulty {statistics.difficulty:.2f}, below {HARD}: check the key, then the teaching")
    return found


@dataclass(frozen=True)
class Reliability:
    name: str  # "KR-20" (right-or-wrong questions of equal points) or "Cronbach's alpha"
    value: float | None
    why: str = ""  # why there is no value


def reliability(marks: Sequence[Mark]) -> Reliability:
    """Cronbach's alpha over the students' points per question: k/(k-1) * (1 - sum of the questions'
    variances / variance of the totals). With every question scored 0 or full marks and all worth the same,
    that is KR-20 (each variance is then p(1-p) times the points squared), and it is named so."""
    scores: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for mark in marks:
        scores[(mark.student, mark.version)][mark.question] = mark.earned
    dichotomous = all(m.earned in (0, m.possible) for m in marks) and len({m.possible for m in marks}) <= 1
    name = "KR-20" if dichotomous else "Cronbach's alpha"
    rows = list(scores.values())
    questions = sorted(set.intersection(*(set(row) for row in rows))) if rows else []
    if len(rows) < 2 or len(questions) < 2:
        return Reliability(name, None, "needs 2 students and 2 questions or more")
    totals = [sum(row[q] for q in questions) for row in rows]
    spread = _variance(totals)
    if spread <= 1e-12:
        return Reliability(name, None, "every student has the same total")
    k = len(questions)
    parts = sum(_variance([row[q] for row in rows]) for q in questions)
    return Reliability(name, k / (k - 1) * (1 - parts / spread))


def _variance(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values)
