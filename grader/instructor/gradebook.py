"""The batch's gradebook: one CSV row per submission (with its student's id, given a roster), one column per
exercise, the total, which file was graded for each exercise and why, the problem, the tamper scan's marks
for review (`file:line: reason`; the gradebook is the instructor's alone), and the instructor's score overrides
(grader/instructor/overrides.py): an overridden exercise shows the override's score and the total counts it, and
the `overrides` column keeps the graded score visible (`ex03_train_ddp: 4 -> 6 (note)`).

Rows are appended and flushed as submissions finish, so a batch stopped half-way (Ctrl-C, a crash
of the machine) still leaves the rows of everything graded; `close` rewrites it sorted by name, through
`write_gradebook`, which `grader override` and `grader regrade --accept` call too (from grades.jsonl).
`merge` joins the gradebooks of several runs (the shards of a cluster job) into one; a gradebook of an older
grader, without the columns added since (`OPTIONAL`), is merged with those cells empty.

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
from grader.instructor import manifest, overrides
from grader.instructor.overrides import Override
from grader.instructor.submission_grade import SubmissionGrade
from grader.report.inert import csv_cell

FILENAME = "gradebook.csv"
CELL_LIMIT = 10_000  # characters of a cell (a spreadsheet holds 32,767)
# columns a gradebook of an older grader may lack, in the order of the newer ones: "files" before "problem", the
# others after it
OPTIONAL = ("files", "review", "overrides")


def _cells(row: Sequence[str]) -> list[str]:
    return [csv_cell(cell, CELL_LIMIT) for cell in row]


def gradebook_header(exercise_ids: Sequence[str], students: bool) -> list[str]:
    student = ["student_id"] if students else []
    return [
        "submission",
        *student,
        *exercise_ids,
        "total",
        "max_score",
        "seconds",
        "files",
        "problem",
        "review",
        "overrides",
    ]


def row(
    grade: SubmissionGrade,
    exercise_ids: Sequence[str],
    student_ids: Mapping[str, str] | None = None,
    overridden: Mapping[tuple[str, str], Override] | None = None,
) -> list[str]:
    """The grade's row: each exercise's score, or its override's (the graded one in the overrides column)."""
    mine = {o.exercise: o for o in overrides.of_grade(grade.name, overridden or {})}
    scores = {i: grade.exercise_score(i) for i in exercise_ids}
    shown = {i: mine[i].score if i in mine else scores[i] for i in exercise_ids}
    student = [student_ids.get(grade.name, "")] if student_ids is not None else []
    return _cells(
        [
            grade.name,
            *student,
            *(f"{shown[i]:g}" for i in exercise_ids),
            f"{grade.score + sum(shown[i] - scores[i] for i in exercise_ids):g}",
            f"{grade.max_score:g}",
            f"{grade.seconds:.1f}",
            "; ".join(grade.files),
            grade.problem_column,
            "; ".join(map(str, grade.review)),
            "; ".join(overrides.described(o, scores[o.exercise]) for o in mine.values() if o.exercise in scores),
        ]
    )


def write_gradebook(
    path: Path,
    exercise_ids: Sequence[str],
    grades: Sequence[SubmissionGrade],
    student_ids: Mapping[str, str] | None = None,
    overridden: Mapping[tuple[str, str], Override] | None = None,
) -> None:
    """The whole gradebook of `grades` with the overrides applied, sorted by name (the file replaced)."""
    rows = [row(g, exercise_ids, student_ids, overridden) for g in grades]
    _write(path, gradebook_header(exercise_ids, student_ids is not None), rows)


class Gradebook:
    """`student_ids` (submission name -> the roster's id, grader/instructor/roster.py) adds a `student_id` column;
    `overridden` are OUT's overrides, applied to each row."""

    def __init__(
        self,
        path: Path,
        catalog: Catalog,
        student_ids: Mapping[str, str] | None = None,
        overridden: Mapping[tuple[str, str], Override] | None = None,
    ) -> None:
        self.path = path
        self._ids = [e.id for e in catalog.exercises]
        self._students = student_ids
        self._overridden = overridden
        self._grades: list[SubmissionGrade] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "w", newline="")
        self._writer = csv.writer(self._file)
        self._writer.writerow(gradebook_header(self._ids, student_ids is not None))
        self._file.flush()

    def on_start(self, name: str) -> None:
        pass

    def on_result(self, grade: SubmissionGrade) -> None:
        self._grades.append(grade)
        self._writer.writerow(row(grade, self._ids, self._students, self._overridden))
        self._file.flush()

    def close(self) -> None:
        self._file.close()
        write_gradebook(self.path, self._ids, self._grades, self._students, self._overridden)

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


def _required(columns: list[str]) -> list[str]:
    """The columns every gradebook of one course has, whichever grader wrote it."""
    return [column for column in columns if column not in OPTIONAL]


def _widest(one: list[str], other: list[str]) -> list[str]:
    """Two gradebooks' columns (of one course) joined: the required ones with every optional one either has, each
    where the newer grader puts it ("files" before "problem", "review" and "overrides" after it)."""
    present = set(one) | set(other)
    joined = []
    for column in _required(one):
        if column == "problem":
            joined += ["files"] if "files" in present else []
            joined += ["problem", *(c for c in OPTIONAL[1:] if c in present)]
        else:
            joined.append(column)
    return joined if "problem" in joined else [*joined, *(c for c in OPTIONAL if c in present)]


def merge(sources: Sequence[Path], out: Path) -> MergeResult:
    """Join the gradebooks of `sources` into `out`, refusing a submission graded twice."""
    header: list[str] | None = None
    first_source = Path()
    rows: dict[str, tuple[dict[str, str], Path]] = {}  # submission -> its cells by column, and its source
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
        elif _required(columns) != _required(header):
            raise MergeError(
                f"{source}: its gradebook's columns differ from {first_source}'s "
                "(graded with another catalog or --exercises?): merge runs of one course only"
            )
        else:
            header = _widest(header, columns)
        for cells in map(_cells, body):
            if cells[0] in rows:
                raise MergeError(
                    f"submission {cells[0]!r} is in both {rows[cells[0]][1]} and {source}: "
                    "it was graded twice (overlapping shards?); drop one of them"
                )
            rows[cells[0]] = (dict(zip(columns, cells, strict=False)), source)
    if len(splits) > 1:
        counts = ", ".join(f"N={n}" for n in sorted(splits))
        raise MergeError(f"the outputs come from different splits ({counts}): merge the shards of one job")
    if header is None:
        raise MergeError("none of the sources holds a gradebook yet: nothing to merge")
    _write(out, header, [[named.get(column, "") for column in header] for named, _ in rows.values()])
    missing_shards = [f"{i}/{n}" for n, seen in splits.items() for i in range(1, n + 1) if i not in seen]
    missing = sorted(name for name in expected if csv_cell(name, CELL_LIMIT) not in rows)  # rows hold cells
    return MergeResult(out, len(rows), missing, missing_shards, unaccounted)
