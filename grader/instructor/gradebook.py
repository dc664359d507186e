"""The batch's gradebook: one CSV row per submission (with its student's id, given a roster), one column per
exercise, the total, which file was graded for each exercise and why, the problem, and the tamper scan's marks
for review (`file:line: reason`; the gradebook is the instructor's alone).

Rows are appended and flushed as submissions finish, so a batch stopped half-way (Ctrl-C, a crash
of the machine) still leaves the rows of everything graded; `close` rewrites it sorted by name.
`merge` joins the gradebooks of several runs (the shards of a cluster job) into one.

Every cell goes through `csv_cell` on its way out: a submission named `=HYPERLINK(...)` or a problem
starting with `+` is a text cell in a spreadsheet, never a formula, and control characters are
shown escaped. A merge applies it again (it changes nothing twice), so it also disarms a gradebook
written by hand or by an older grader.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.catalog import Catalog
from grader.instructor import manifest
from grader.instructor.submission_grade import SubmissionGrade
from grader.report.inert import csv_cell

FILENAME = "gradebook.csv"
CELL_LIMIT = 10_000  # characters of a cell (a spreadsheet holds 32,767)


def _cells(row: Sequence[str]) -> list[str]:
    return [csv_cell(cell, CELL_LIMIT) for cell in row]


class Gradebook:
    """`student_ids` (submission name -> the roster's id, grader/instructor/roster.py) adds a `student_id` column."""

    def __init__(self, path: Path, catalog: Catalog, student_ids: Mapping[str, str] | None = None) -> None:
        self.path = path
        self._ids = [e.id for e in catalog.exercises]
        self._students = student_ids
        student = ["student_id"] if student_ids is not None else []
        scores = [*self._ids, "total", "max_score", "seconds"]
        self._header = ["submission", *student, *scores, "files", "problem", "review"]
        self._rows: list[list[str]] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "w", newline="")
        self._writer = csv.writer(self._file)
        self._writer.writerow(self._header)
        self._file.flush()

    def on_start(self, name: str) -> None:
        pass

    def on_result(self, grade: SubmissionGrade) -> None:
        student = [self._students.get(grade.name, "")] if self._students is not None else []
        row = _cells(
            [
                grade.name,
                *student,
                *(f"{grade.exercise_score(i):g}" for i in self._ids),
                f"{grade.score:g}",
                f"{grade.max_score:g}",
                f"{grade.seconds:.1f}",
                "; ".join(grade.files),
                grade.problem_column,
                "; ".join(map(str, grade.review)),
            ]
        )
        self._rows.append(row)
        self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        self._file.close()
        _write(self.path, self._header, self._rows)

    def __enter__(self) -> Gradebook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _write(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(_cells(header))
        ordered = sorted(map(_cells, rows), key=lambda row: row[0])
        writer.writerows(ordered)


class MergeError(Exception):
    """The gradebooks cannot be joined (duplicates, different columns, unreadable); nothing is written."""


@dataclass
class MergeResult:
    path: Path
    rows: int
    missing: list[str] = field(default_factory=list)  # named on a shard's command line, in no gradebook
    missing_shards: list[str] = field(default_factory=list)  # "2/4": no output of that shard was given
    unaccounted: list[Path] = field(default_factory=list)  # sources without a batch.json: completeness unknown

    @property
    def complete(self) -> bool:
        return not self.missing and not self.missing_shards


def gradebook_of(source: Path) -> tuple[Path, Path]:
    """(the gradebook, the batch.json beside it) of a `grader grade --out` folder or of a gradebook file."""
    if source.is_dir():
        return source / FILENAME, source / manifest.FILENAME
    if source.is_file():
        return source, source.with_name(manifest.FILENAME)
    raise MergeError(f"{source}: no such file or folder")


def read(path: Path) -> tuple[list[str], list[list[str]]]:
    """A gradebook's header and rows, as `grader grade` wrote them (a MergeError when it is none)."""
    try:
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise MergeError(f"{path}: cannot be read as a gradebook: {exc}") from exc
    if not rows or rows[0][:1] != ["submission"]:
        raise MergeError(f"{path}: not a gradebook written by `grader grade` (no 'submission' column first)")
    return rows[0], rows[1:]


def merge(sources: Sequence[Path], out: Path) -> MergeResult:
    """Join the gradebooks of `sources` into `out`, refusing a submission graded twice."""
    header: list[str] | None = None
    first_source = Path()
    rows: dict[str, tuple[list[str], Path]] = {}
    expected: set[str] = set()
    splits: dict[int, set[int]] = {}
    unaccounted: list[Path] = []
    for source in sources:
        book, batch = gradebook_of(source)
        if book.resolve() == out.resolve():
            raise MergeError(f"{out} is one of the gradebooks to merge: write the merge to another file")
        if batch.is_file():
            try:
                run = manifest.read_manifest(batch)
            except manifest.ManifestError as exc:
                raise MergeError(str(exc)) from exc
            expected.update(run.submissions)
            if run.shard is not None:
                splits.setdefault(run.shard.count, set()).add(run.shard.index)
        else:
            unaccounted.append(source)
        if not book.is_file():
            if batch.is_file():
                continue  # the run wrote its manifest and died before its gradebook: reported as missing
            raise MergeError(f"{source}: holds no {FILENAME} (is it a `grader grade --out` folder?)")
        columns, body = read(book)
        if header is None:
            header, first_source = columns, source
        elif columns != header:
            raise MergeError(
                f"{source}: its gradebook's columns differ from {first_source}'s "
                "(graded with another catalog or --exercises?): merge runs of one course only"
            )
        for row in map(_cells, body):
            if row[0] in rows:
                raise MergeError(
                    f"submission {row[0]!r} is in both {rows[row[0]][1]} and {source}: "
                    "it was graded twice (overlapping shards?); drop one of them"
                )
            rows[row[0]] = (row, source)
    if len(splits) > 1:
        counts = ", ".join(f"N={n}" for n in sorted(splits))
        raise MergeError(f"the outputs come from different splits ({counts}): merge the shards of one job")
    if header is None:
        raise MergeError("none of the sources holds a gradebook yet: nothing to merge")
    _write(out, header, [row for row, _ in rows.values()])
    missing_shards = [f"{i}/{n}" for n, seen in splits.items() for i in range(1, n + 1) if i not in seen]
    missing = sorted(name for name in expected if csv_cell(name, CELL_LIMIT) not in rows)  # rows hold cells
    return MergeResult(out, len(rows), missing, missing_shards, unaccounted)
