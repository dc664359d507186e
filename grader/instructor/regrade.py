"""What a regrade changed (`grader regrade OLD_OUT --out NEW_OUT`): the old and new grades.jsonl compared check by
check, written as NEW_OUT/regrade.md (to read) and NEW_OUT/regrade.csv (one row per changed check).

A check's result changed when its status or its points did (a message alone, same verdict, is no change: it
may name a time). A check one batch has and the other lacks is a change from or to "absent". The report also
says what changed in the provenance (grader version, commit, each exercise's checks), each submission's graded
score old -> new, how many of each check changed which way, and each override whose graded score under it
changed (the override is kept; grader/instructor/overrides.py).

Names and messages come from students: the CSV's cells go through `csv_cell`, the Markdown's text through
`markdown_text` (every punctuation character escaped, control characters shown as escapes).
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.instructor.overrides import Override, key_of
from grader.instructor.submission_grade import SubmissionGrade
from grader.judge.verdict import CheckResult
from grader.report.inert import csv_cell, markdown_text

MARKDOWN = "regrade.md"
CSV = "regrade.csv"
ABSENT = "absent"
MESSAGE_SHOWN = 300  # characters of a message in regrade.md (the CSV keeps CELL_LIMIT)
CELL_LIMIT = 10_000
CSV_HEADER = [
    "submission",
    "exercise",
    "check",
    "world_size",
    "old_status",
    "new_status",
    "old_points",
    "new_points",
    "old_message",
    "new_message",
    "override",
]
FLAG = "check: the grade under it changed"

Key = tuple[str, str, int]  # exercise, check, world size


@dataclass(frozen=True)
class Change:
    submission: str
    exercise: str
    check: str
    world_size: int
    old: CheckResult | None  # None: the old batch had no such check
    new: CheckResult | None

    @property
    def transition(self) -> str:
        return f"{_status(self.old)} -> {_status(self.new)}"


@dataclass(frozen=True)
class Flagged:
    """An override whose graded score under it changed: kept, and said."""

    override: Override
    old_score: float
    new_score: float


@dataclass
class RegradeDiff:
    changes: list[Change]
    scores: list[tuple[str, float, float]]  # submission, old graded total, new graded total: those that differ
    flagged: list[Flagged]
    provenance: list[str]  # what changed in what grades, one sentence each
    only_old: list[str] = field(default_factory=list)  # submissions the old batch graded, the new one not
    only_new: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """How many gradebook rows change: submissions with a changed check, or graded by one batch only."""
        return len({c.submission for c in self.changes} | set(self.only_old) | set(self.only_new))

    def counts(self) -> list[tuple[str, str, str, int]]:
        """(exercise, check, old -> new, how many) for every check and way it changed."""
        tally = Counter((c.exercise, c.check, c.transition) for c in self.changes)
        return [(e, c, way, n) for (e, c, way), n in sorted(tally.items())]


def _status(result: CheckResult | None) -> str:
    return ABSENT if result is None else result.status


def _points(result: CheckResult | None) -> str:
    return "" if result is None else f"{result.points:g}"


def _by_check(grade: SubmissionGrade) -> dict[Key, CheckResult]:
    return {(r.exercise, r.check, r.world_size): r for r in grade.results}


def _changed(old: CheckResult | None, new: CheckResult | None) -> bool:
    if old is None or new is None:
        return old is not new
    return old.status != new.status or old.points != new.points


def compare(
    old: Sequence[SubmissionGrade],
    new: Sequence[SubmissionGrade],
    overridden: Mapping[tuple[str, str], Override],
    provenance: list[str],
) -> RegradeDiff:
    """The changes from the `old` grades to the `new` ones, submission by submission, in the new order."""
    before = {g.name: g for g in old}
    changes: list[Change] = []
    scores: list[tuple[str, float, float]] = []
    flagged: list[Flagged] = []
    for grade in new:
        was = before.get(grade.name)
        if was is None:
            continue
        olds, news = _by_check(was), _by_check(grade)
        for key in sorted(olds.keys() | news.keys(), key=lambda k: (k[0], k[1], k[2])):
            if _changed(olds.get(key), news.get(key)):
                changes.append(Change(grade.name, *key, olds.get(key), news.get(key)))
        if was.score != grade.score:
            scores.append((grade.name, was.score, grade.score))
        for exercise in sorted({r.exercise for r in grade.results} | {r.exercise for r in was.results}):
            override = overridden.get(key_of(grade.name, exercise))
            if override is not None and was.exercise_score(exercise) != grade.exercise_score(exercise):
                flagged.append(Flagged(override, was.exercise_score(exercise), grade.exercise_score(exercise)))
    graded = {g.name for g in new}
    return RegradeDiff(
        changes,
        scores,
        flagged,
        provenance,
        sorted(n for n in before if n not in graded),
        sorted(n for n in graded if n not in before),
    )


def _override_cell(diff: RegradeDiff, change: Change) -> str:
    for flag in diff.flagged:
        if flag.override.key == key_of(change.submission, change.exercise):
            return f"{flag.override.score:g} kept ({flag.old_score:g} -> {flag.new_score:g} under it): {FLAG}"
    return ""


def write_csv(path: Path, diff: RegradeDiff) -> None:
    """One row per changed check, every cell inert."""
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_HEADER)
        for c in diff.changes:
            row = [
                c.submission,
                c.exercise,
                c.check,
                str(c.world_size),
                _status(c.old),
                _status(c.new),
                _points(c.old),
                _points(c.new),
                "" if c.old is None else c.old.message,
                "" if c.new is None else c.new.message,
                _override_cell(diff, c),
            ]
            writer.writerow([csv_cell(cell, CELL_LIMIT) for cell in row])


def _md(text: str) -> str:
    return markdown_text(text, MESSAGE_SHOWN)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table; every cell is inert already."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def render_markdown(diff: RegradeDiff, old_out: str, new_out: str) -> str:
    """The report to read: what changed in what graded, then scores, counts, overrides and each change."""
    lines = [f"# Regrade of {_md(old_out)} into {_md(new_out)}", ""]
    lines += ["## What graded", ""]
    lines += [f"- {_md(said)}" for said in diff.provenance] or ["- the same grader and checks as before"]
    lines += ["", f"{len(diff.changes)} check result(s) changed in {diff.rows} submission(s).", ""]
    if diff.only_old or diff.only_new:
        lines += [f"- graded before, not now: {_md(name)}" for name in diff.only_old]
        lines += [f"- graded now, not before: {_md(name)}" for name in diff.only_new]
        lines.append("")
    if diff.scores:
        rows = [[_md(name), f"{old:g}", f"{new:g}", f"{new - old:+g}"] for name, old, new in diff.scores]
        lines += ["## Scores", "", *_table(["submission", "old", "new", "change"], rows), ""]
    if diff.changes:
        rows = [[_md(e), _md(c), _md(way), str(n)] for e, c, way, n in diff.counts()]
        lines += ["## Changes per check", "", *_table(["exercise", "check", "old -> new", "submissions"], rows), ""]
    if diff.flagged:
        rows = [
            [_md(f.override.submission), _md(f.override.exercise), f"{f.old_score:g} -> {f.new_score:g}"]
            + [f"{f.override.score:g}", _md(f.override.note), FLAG]
            for f in diff.flagged
        ]
        header = ["submission", "exercise", "graded", "override (kept)", "note", ""]
        lines += ["## Overrides", "", *_table(header, rows), ""]
    if diff.changes:
        rows = [
            [_md(c.submission), _md(c.exercise), _md(c.check), str(c.world_size), _md(c.transition)]
            + [f"{_points(c.old) or '-'} -> {_points(c.new) or '-'}"]
            + [_md("" if c.old is None else c.old.message), _md("" if c.new is None else c.new.message)]
            for c in diff.changes
        ]
        header = ["submission", "exercise", "check", "W", "status", "points", "old message", "new message"]
        lines += ["## Each change", "", *_table(header, rows), ""]
    return "\n".join(lines)


def write(out: Path, diff: RegradeDiff, old_out: Path) -> tuple[Path, Path]:
    """NEW_OUT/regrade.md and NEW_OUT/regrade.csv."""
    markdown, table = out / MARKDOWN, out / CSV
    markdown.write_text(render_markdown(diff, str(old_out), str(out)), encoding="utf-8")
    write_csv(table, diff)
    return markdown, table
