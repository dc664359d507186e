"""`grader export-grades`: a gradebook's totals as the CSV an LMS imports, its students found in the LMS's roster.

The roster is the LMS's own export of its students, as it comes: Canvas's Gradebook export (Student, ID, SIS
User ID, SIS Login ID, Section, then its assignments, `Name (id)`, and a Points Possible row), Moodle's grade
export or participants download (First name, Last name, ID number, Username, Email address...). A submission
is a student of the roster when its name is one of that student's ids (for Canvas its SIS Login ID, SIS User
ID or ID; for Moodle its Username, ID number or Email address; an e-mail address also by the part before the
@), or, where the roster has a `submission` column, that column's value: the ids are what submissions are
named after, the names are not unique.

What cannot be matched is never dropped or guessed: a submission of no roster student, one that is several
students, and two submissions of one student are left out of the file and named, and the command exits 1.
Every cell goes through `csv_cell`, as the gradebook's do, so a name starting with `=` stays text.
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.instructor import gradebook
from grader.report.inert import csv_cell, one_line

FORMATS = ("canvas", "moodle")
CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")  # the Canvas import's leading columns
CANVAS_IDS = ("SIS Login ID", "SIS User ID", "ID")
MOODLE_COLUMNS = ("First name", "Last name", "Surname", "ID number", "Username", "Email address")
MOODLE_IDS = ("Username", "ID number", "Email address")
POINTS_ROW = "Points Possible"
SUBMISSION = "submission"


class ExportError(Exception):
    """The gradebook or the roster cannot be read, or the roster is not the format's."""


@dataclass
class Export:
    path: Path
    written: int
    points: str  # the maximum score, which the LMS's grade item or assignment should have
    unknown: list[str] = field(default_factory=list)  # submissions of no roster student
    ambiguous: list[str] = field(default_factory=list)  # "name: student, student": a submission of several
    twice: list[str] = field(default_factory=list)  # "student: name, name": a student of several submissions
    ungraded: list[str] = field(default_factory=list)  # roster students no submission is of

    @property
    def complete(self) -> bool:
        return not (self.unknown or self.ambiguous or self.twice)


@dataclass(frozen=True)
class _Student:
    line: int
    cells: dict[str, str]  # header name as the roster spells it -> cell
    ids: frozenset[str]  # what a submission may be named (csv_cell'd and casefolded, as the gradebook holds names)

    def shown(self, columns: Sequence[str]) -> str:
        return next((self.cells[c] for c in columns if self.cells.get(c)), f"roster line {self.line}")


def export(source: Path, roster: Path, form: str, out: Path, assignment: str) -> Export:
    """Write `out` in `form` (canvas or moodle) from the gradebook at `source` and the LMS's `roster`."""
    book, _ = _gradebook(source)
    header, rows = _read_gradebook(book)
    totals = {row[0]: row[header.index("total")] for row in rows}
    points = {row[header.index("max_score")] for row in rows}
    if len(points) > 1:
        raise ExportError(f"{book}: its rows have different max_score ({', '.join(sorted(points))}): export one run")
    names, students = _read_roster(roster, form)
    shown = ("Student", *CANVAS_IDS) if form == "canvas" else MOODLE_IDS
    matches = {name: [s for s in students if name.casefold() in s.ids] for name in totals}
    result = Export(out, 0, points.pop() if points else "0")
    result.unknown = [name for name, found in matches.items() if not found]
    result.ambiguous = [
        f"{name}: {'; '.join(s.shown(shown) for s in found)}" for name, found in matches.items() if len(found) > 1
    ]
    submissions: dict[int, list[str]] = defaultdict(list)  # roster line -> the submissions that are that student
    for name, found in matches.items():
        if len(found) == 1:
            submissions[found[0].line].append(name)
    result.twice = [
        f"{s.shown(shown)}: {', '.join(submissions[s.line])}" for s in students if len(submissions[s.line]) > 1
    ]
    result.ungraded = [s.shown(shown) for s in students if not submissions[s.line]]
    graded = [(s, totals[submissions[s.line][0]]) for s in students if len(submissions[s.line]) == 1]
    columns, table = _table(form, names, graded)
    body = [[*cells, score] for cells, score in table]
    if form == "canvas":
        body.insert(0, [POINTS_ROW, *[""] * (len(columns) - 1), result.points])
    column = _assignment(names, assignment) if form == "canvas" else assignment
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow([csv_cell(c, gradebook.CELL_LIMIT) for c in (*columns, column)])
            writer.writerows([csv_cell(c, gradebook.CELL_LIMIT) for c in row] for row in body)
    except OSError as exc:
        raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from None
    result.written = len(table)
    return result


def _gradebook(source: Path) -> tuple[Path, Path]:
    try:
        return gradebook.gradebook_of(source)
    except gradebook.MergeError as exc:
        raise ExportError(str(exc)) from None


def _read_gradebook(book: Path) -> tuple[list[str], list[list[str]]]:
    if not book.is_file():
        raise ExportError(f"{book}: no such gradebook (give a `grader grade --out` folder or its gradebook.csv)")
    try:
        header, rows = gradebook.read(book)
    except gradebook.MergeError as exc:
        raise ExportError(str(exc)) from None
    if "total" not in header or "max_score" not in header:
        raise ExportError(f"{book}: a gradebook without its total and max_score columns")
    return header, [row for row in rows if row]


def _read_roster(path: Path, form: str) -> tuple[list[str], list[_Student]]:
    """The roster's header and its students (rows with an id: Canvas's Points Possible row has none)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ExportError(f"roster {path} does not exist") from None
    except UnicodeDecodeError:
        raise ExportError(
            f"{path}: the roster is not UTF-8; save it from the LMS or a spreadsheet as UTF-8 CSV"
        ) from None
    except OSError as exc:
        raise ExportError(f"{path}: cannot read the roster ({exc.strerror or exc})") from None
    first = next((line for line in text.splitlines() if line.strip()), "")
    delimiter = max((",", ";", "\t"), key=first.count)
    rows = list(csv.reader(text.splitlines(), delimiter=delimiter))
    header = [cell.strip() for cell in rows[0]] if rows else []
    lowered = {name.lower(): name for name in header}
    ids = [lowered[c.lower()] for c in (CANVAS_IDS if form == "canvas" else MOODLE_IDS) if c.lower() in lowered]
    explicit = lowered.get(SUBMISSION)
    if not ids and not explicit:
        wanted = ", ".join(CANVAS_IDS if form == "canvas" else MOODLE_IDS)
        export_name = "Gradebook export" if form == "canvas" else "grade export or participants download"
        raise ExportError(
            f"{path}: not a {form.title()} roster: no {wanted} column (found: "
            f"{', '.join(map(one_line, header[:12])) or 'nothing'}); give the {export_name}"
        )
    students = []
    for line, row in enumerate(rows[1:], 2):
        cells = dict(zip(header, (cell.strip() for cell in row)))
        names = [cells.get(explicit, "")] if explicit else [cells.get(c, "") for c in ids]
        names += [name.split("@")[0] for name in names if not explicit and re.fullmatch(r"[^@\s]+@[^@\s]+", name)]
        found = frozenset(csv_cell(name, gradebook.CELL_LIMIT).casefold() for name in names if name)
        if found:
            students.append(_Student(line, cells, found))
    return header, students


def _table(
    form: str, header: list[str], graded: list[tuple[_Student, str]]
) -> tuple[list[str], list[tuple[list[str], str]]]:
    """The identity columns the format's import reads, and each graded student's cells in them."""
    if form == "canvas":
        lowered = {name.lower(): name for name in header}
        columns = list(CANVAS_COLUMNS)
        return columns, [([s.cells.get(lowered.get(c.lower(), ""), "") for c in columns], score) for s, score in graded]
    columns = [name for name in header if name.lower() in {c.lower() for c in MOODLE_COLUMNS}]
    return columns, [([s.cells.get(c, "") for c in columns], score) for s, score in graded]


def _assignment(header: list[str], name: str) -> str:
    """Canvas's column of the assignment: the roster's `name (id)` where the course has it (the grades go to that
    assignment), else `name`, which Canvas imports as a new assignment."""
    existing = [column for column in header if re.fullmatch(rf"{re.escape(name)} \(\d+\)", column)]
    return existing[0] if len(existing) == 1 else name
