"""An instructor's score overrides (`OUT/overrides.csv`): one exercise's score of one submission set by hand,
with a note, who and when. The gradebook shows the overridden score (and the total with it) and keeps the
graded one visible in its `overrides` column; `grader regrade` carries the file on and flags an override whose
graded score under it changed. results.json and the class report keep the graded scores.

One row per submission and exercise: a new override of the same replaces the old. Every cell goes through
`csv_cell`; the submission is kept as that cell, so a grade is matched by `csv_cell(name)` (idempotent).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from grader.report.inert import csv_cell

FILENAME = "overrides.csv"
HEADER = ["submission", "exercise", "score", "note", "when", "who"]
CELL_LIMIT = 10_000


class OverrideError(Exception):
    """An overrides.csv that cannot be read back; the message names the file and row."""


@dataclass(frozen=True)
class Override:
    submission: str  # as its gradebook cell: csv_cell(name)
    exercise: str
    score: float
    note: str
    when: str
    who: str

    @property
    def key(self) -> tuple[str, str]:
        return self.submission, self.exercise


def key_of(name: str, exercise: str) -> tuple[str, str]:
    """The key of a grade's exercise among overrides (names are kept as their CSV cells)."""
    return csv_cell(name, CELL_LIMIT), exercise


def read_overrides(path: Path) -> dict[tuple[str, str], Override]:
    """The overrides of OUT (none when it has no overrides.csv), by (submission cell, exercise)."""
    if not path.exists():
        return {}
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise OverrideError(f"{path}: cannot be read: {exc}") from exc
    if not rows or rows[0] != HEADER:
        raise OverrideError(f"{path}: not an overrides file written by `grader override` (columns {HEADER})")
    found = {}
    for number, row in enumerate(rows[1:], 2):
        try:
            submission, exercise, score, note, when, who = row
            value = float(score)
        except ValueError as exc:
            raise OverrideError(f"{path}, row {number}: not an override written by `grader override`") from exc
        if not math.isfinite(value):
            raise OverrideError(f"{path}, row {number}: the score {score!r} is not a number")
        override = Override(submission, exercise, value, note, when, who)
        found[override.key] = override
    return found


def write_overrides(path: Path, overrides: Iterable[Override]) -> None:
    """Every override, sorted by submission and exercise (none: the file is removed)."""
    ordered = sorted(overrides, key=lambda o: o.key)
    if not ordered:
        path.unlink(missing_ok=True)
        return
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(HEADER)
        for o in ordered:
            row = [o.submission, o.exercise, f"{o.score:g}", o.note, o.when, o.who]
            writer.writerow([csv_cell(cell, CELL_LIMIT) for cell in row])


def described(override: Override, graded: float) -> str:
    """The gradebook's account of one override: `ex03_train_ddp: 4 -> 6 (the note)`."""
    note = f" ({override.note})" if override.note else ""
    return f"{override.exercise}: {graded:g} -> {override.score:g}{note}"


def of_grade(name: str, overrides: Mapping[tuple[str, str], Override]) -> list[Override]:
    """The overrides of one submission, by exercise."""
    cell = csv_cell(name, CELL_LIMIT)
    return sorted((o for o in overrides.values() if o.submission == cell), key=lambda o: o.exercise)
