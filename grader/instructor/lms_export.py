"""`grader export-grades`: a gradebook's totals as the CSV an LMS imports, its students found in the LMS's roster.

The roster is the LMS's own export of its students, as it comes, read by grader/instructor/roster.py as every
roster is: Canvas's Gradebook export (Student, ID, SIS User ID, SIS Login ID, Section, then its assignments,
`Name (id)`, and a Points Possible row), Moodle's grade export or participants download (First name, Last name,
ID number, Username, Email address...). A submission is a student of the roster when its name is one of that
student's ids, login or e-mail address (for Canvas its SIS Login ID, SIS User ID or ID; for Moodle its Username,
ID number or Email address; an e-mail address also by the part before the @), or, where the roster has a
`submission` column, that column's value: the ids are what submissions are named after, the names are not unique.

What cannot be matched is never dropped or guessed: a submission of no roster student, one that is several
students, and two submissions of one student are left out of the file and named, and the command exits 1.
Every cell goes through `csv_cell`, as the gradebook's do, so a name starting with `=` stays text.
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from grader.instructor import gradebook, roster
from grader.instructor.roster import Roster, Student
from grader.report.inert import csv_cell

FORMATS = tuple(roster.LMS_IDS)
CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")  # the Canvas import's leading columns
MOODLE_COLUMNS = ("First name", "Last name", "Surname", "ID number", "Username", "Email address")
POINTS_ROW = "Points Possible"
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+")


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


def _names(student: Student, by_submission: bool) -> frozenset[str]:
    """What a submission of the student may be named, as the gradebook holds names (csv_cell'd, casefolded)."""
    names = [student.submission] if by_submission else [*student.ids, student.login, student.email]
    names += [name.split("@")[0] for name in names if not by_submission and _EMAIL.fullmatch(name)]
    return frozenset(csv_cell(name, gradebook.CELL_LIMIT).casefold() for name in names if name)


def _shown(student: Student, form: str) -> str:
    """The student as the LMS shows them: Canvas by name, Moodle by the ids its import maps users by."""
    if form == "canvas":
        said = (student.name, student.login, *student.ids)
    else:
        said = (student.login, *student.ids, student.email)
    return next((value for value in said if value), f"roster line {student.line}")


def export(source: Path, roster_path: Path, form: str, out: Path, assignment: str) -> Export:
    """Write `out` in `form` (canvas or moodle) from the gradebook at `source` and the LMS's roster at `roster_path`."""
    book, _ = _gradebook(source)
    header, rows = _read_gradebook(book)
    totals = {row[0]: row[header.index("total")] for row in rows}
    points = {row[header.index("max_score")] for row in rows}
    if len(points) > 1:
        raise ExportError(f"{book}: its rows have different max_score ({', '.join(sorted(points))}): export one run")
    students = _read_roster(roster_path, form)
    known = {student: _names(student, students.by_submission) for student in students.students}
    matches = {name: [s for s, names in known.items() if name.casefold() in names] for name in totals}
    result = Export(out, 0, points.pop() if points else "0")
    result.unknown = [name for name, found in matches.items() if not found]
    result.ambiguous = [
        f"{name}: {'; '.join(_shown(s, form) for s in found)}" for name, found in matches.items() if len(found) > 1
    ]
    submissions: dict[Student, list[str]] = defaultdict(list)  # a student -> the submissions that are theirs
    for name, found in matches.items():
        if len(found) == 1:
            submissions[found[0]].append(name)
    result.twice = [
        f"{_shown(s, form)}: {', '.join(submissions[s])}" for s in students.students if len(submissions[s]) > 1
    ]
    result.ungraded = [_shown(s, form) for s in students.students if not submissions[s]]
    graded = [(s, totals[submissions[s][0]]) for s in students.students if len(submissions[s]) == 1]
    columns, table = _table(form, students, graded)
    body = [[*cells, score] for cells, score in table]
    if form == "canvas":
        body.insert(0, [POINTS_ROW, *[""] * (len(columns) - 1), result.points])
    column = _assignment(list(students.columns), assignment) if form == "canvas" else assignment
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


def _read_roster(path: Path, form: str) -> Roster:
    try:
        return roster.read_roster(path, form)
    except roster.RosterError as exc:
        raise ExportError(str(exc)) from None


def _table(
    form: str, students: Roster, graded: list[tuple[Student, str]]
) -> tuple[list[str], list[tuple[list[str], str]]]:
    """The identity columns the format's import reads, and each graded student's cells in them."""
    if form == "canvas":
        lowered = {name.lower(): name for name in students.columns}
        columns = list(CANVAS_COLUMNS)
        return columns, [([s.row.get(lowered.get(c.lower(), ""), "") for c in columns], score) for s, score in graded]
    columns = [name for name in students.columns if name.lower() in {c.lower() for c in MOODLE_COLUMNS}]
    return columns, [([s.row.get(c, "") for c in columns], score) for s, score in graded]


def _assignment(header: list[str], name: str) -> str:
    """Canvas's column of the assignment: the roster's `name (id)` where the course has it (the grades go to that
    assignment), else `name`, which Canvas imports as a new assignment."""
    existing = [column for column in header if re.fullmatch(rf"{re.escape(name)} \(\d+\)", column)]
    return existing[0] if len(existing) == 1 else name
