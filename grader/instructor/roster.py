"""A class roster, as an LMS exports it: who the students are, to put a student id beside each submission
(`grader grade --roster FILE`) and to say who handed in nothing.

The format: a CSV file (UTF-8, a byte-order mark allowed; cells separated by commas, or by semicolons or tabs
as some spreadsheets save it) whose first row names the columns. Columns are matched by name, case and
surrounding spaces ignored; any other column is kept in `Student.row` for whoever needs it (a grade export):
- name: `name`, `student` or `full name`; else `first name` (`firstname`) with `last name` (`lastname`) or
  `surname`, joined;
- id: the first of `id`, `sis user id`, `student id`, `id number` (`idnumber`) the roster has;
- login: `login`, `username`, `login id` or `sis login id`;
- email: `email` or `email address`;
- submission: `submission`, the name of the student's submission where nothing else tells it.
At least one of the id, login, email and submission columns must be there; read as one LMS's own export
(`read_roster(path, lms)`, for `grader export-grades`), one of the columns that LMS names its students by
(`LMS_IDS`) or a submission column. A row with none of them filled in is no student (Canvas's "Points Possible"
row) and is skipped. This is the one reader of rosters: `grader grade --roster`, `grader slurm --roster` and
`grader export-grades` all read them here.

A submission is matched to a student (`Roster.match`) by, in this order, the first key that finds any:
0. its name is the student's `submission` cell;
1. its whole name equals one of the student's id columns, login or email (`jdoe`, `jdoe@uni.edu`, `12345`);
2. it is named as Canvas's "Download Submissions" names files, `<name>[_LATE]_<user id>_<attachment id>_...`
   (a zip `smithjohn_12345_678_repo.zip` is the submission `smithjohn_12345_678_repo`): the user id equals
   one of the student's ids;
3. its name, or the name part of a Canvas name or of a Moodle "download submissions" folder
   (`Full Name_<participant id>_assignsubmission_file_`: the participant id is the assignment's own, not the
   student's), equals the student's name, letters and digits only, case ignored (Canvas writes "Smith, John"
   as `smithjohn`).
A key that finds two students matches neither: the submission is said ambiguous, never given to one.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.report.inert import csv_cell, one_line

FILENAME = "roster.csv"  # what `grader grade --roster` writes beside the gradebook: every student and submission
_NAME = ("name", "student", "full name")
_FIRST, _LAST = ("first name", "firstname"), ("last name", "lastname", "surname")
_IDS = ("id", "sis user id", "student id", "id number", "idnumber")
_LOGIN = ("login", "username", "login id", "sis login id")
_EMAIL = ("email", "email address")
_SUBMISSION = ("submission",)
_CANVAS = re.compile(r"(?P<name>\w*?)_(?:LATE_|late_)?(?P<id>\d+)_\d+(?:_.*)?", re.DOTALL)
_MOODLE = re.compile(r"(?P<name>.+?)_\d+_assign\w*", re.DOTALL)
# the columns an LMS's own export names its students by, and what that export is called there
LMS_IDS = {"canvas": ("SIS Login ID", "SIS User ID", "ID"), "moodle": ("Username", "ID number", "Email address")}
LMS_EXPORTS = {"canvas": "Gradebook export", "moodle": "grade export or participants download"}


class RosterError(Exception):
    """The roster cannot be read, or names none of the columns a student is known by."""


@dataclass(frozen=True)
class Student:
    name: str
    id: str  # the first id column the roster has, filled in or not
    login: str
    email: str
    ids: tuple[str, ...] = ()  # every id column's value (Canvas's `ID` and `SIS User ID`)
    submission: str = ""  # the roster's `submission` cell, where it has one
    line: int = 0  # the roster's line the student is on: two students are two lines, whatever their cells
    row: dict[str, str] = field(default_factory=dict, compare=False, hash=False)  # column as headed -> cell


@dataclass
class Matches:
    """The submissions of a batch against a roster."""

    students: dict[str, Student] = field(default_factory=dict)  # submission name -> its student
    unknown: list[str] = field(default_factory=list)  # submissions that match no student
    ambiguous: dict[str, list[Student]] = field(default_factory=dict)  # submissions that match several
    missing: list[Student] = field(default_factory=list)  # students no submission matches

    def shared(self) -> dict[Student, list[str]]:
        """Students several submissions match (a student handing in twice, or files given one by one)."""
        by_student: dict[Student, list[str]] = {}
        for name, student in self.students.items():
            by_student.setdefault(student, []).append(name)
        return {student: names for student, names in by_student.items() if len(names) > 1}

    def student_ids(self) -> dict[str, str]:
        return {name: student.id for name, student in self.students.items()}

    def lines(self) -> list[str]:
        """What an instructor must look at, one line each: nothing here is dropped, only said."""
        said = []
        if self.unknown:
            said.append(f"{len(self.unknown)} submission(s) match no student of the roster: {', '.join(self.unknown)}")
        for name, found in self.ambiguous.items():
            said.append(f"submission {name} matches {len(found)} students ({', '.join(_who(s) for s in found)})")
        for student, names in self.shared().items():
            said.append(f"{_who(student)} is matched by {len(names)} submissions: {', '.join(names)}")
        if self.missing:
            said.append(f"{len(self.missing)} student(s) handed in nothing: {', '.join(map(_who, self.missing))}")
        return said


def _who(student: Student) -> str:
    return f"{student.name} ({_key(student)})" if student.name else _key(student)


def _key(student: Student) -> str:
    return student.id or student.login or student.email or student.submission


def _plain(text: str) -> str:
    """A name as letters and digits only, case ignored: how a roster's name and a file's name meet."""
    return "".join(c for c in text.casefold() if c.isalnum())


def _pick(row: dict[str, str], columns: dict[str, str], names: Sequence[str]) -> str:
    for name in names:
        if name in columns:
            return (row.get(columns[name]) or "").strip()
    return ""


@dataclass
class Roster:
    students: list[Student]
    columns: tuple[str, ...] = ()  # the header, in order, as the roster spells it (spaces around trimmed)

    @property
    def by_submission(self) -> bool:
        """Whether the roster has a `submission` column, which then names each student's submission."""
        return any(name.casefold() in _SUBMISSION for name in self.columns)

    def _by(self, key: str, values: Sequence[str]) -> list[Student]:
        wanted = {v.casefold() for v in values if v}
        if key == "name":
            return [s for s in self.students if _plain(s.name) and _plain(s.name) in wanted]
        if key == "id":
            return [s for s in self.students if wanted & {i.casefold() for i in s.ids}]
        if key == "submission":
            return [s for s in self.students if s.submission and s.submission.casefold() in wanted]
        return [s for s in self.students if wanted & {v.casefold() for v in (*s.ids, s.login, s.email) if v}]

    def match(self, submission: str) -> list[Student]:
        """The students a submission's name finds by the first key that finds any (the module's docstring)."""
        canvas, moodle = _CANVAS.fullmatch(submission), _MOODLE.fullmatch(submission)
        steps = [("submission", [submission]), ("any", [submission]), ("id", [canvas["id"]] if canvas else [])]
        names = [submission, *([canvas["name"]] if canvas else []), *([moodle["name"]] if moodle else [])]
        steps.append(("name", [_plain(n) for n in names]))
        for key, values in steps:
            found = self._by(key, values)
            if found:
                return found
        return []

    def match_all(self, submissions: Sequence[str]) -> Matches:
        matches = Matches()
        for name in submissions:
            found = self.match(name)
            if len(found) == 1:
                matches.students[name] = found[0]
            elif found:
                matches.ambiguous[name] = found
            else:
                matches.unknown.append(name)
        given = set(matches.students.values())
        matches.missing = [s for s in self.students if s not in given]
        return matches


def _table(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The CSV's header (names trimmed) and its rows, each with its line and its cells (trimmed) by column."""
    unreadable = f"{path}: cannot be read as a CSV roster"
    try:
        text = path.read_text(encoding="utf-8-sig")
        first = next((line for line in text.splitlines() if line.strip()), "")
        reader = csv.DictReader(text.splitlines(), delimiter=max((",", ";", "\t"), key=first.count))
        reader.fieldnames = [name.strip() for name in reader.fieldnames or [] if name is not None]
        rows = [
            (reader.line_num, {k: v.strip() for k, v in row.items() if isinstance(k, str) and isinstance(v, str)})
            for row in reader
        ]
    except FileNotFoundError:
        raise RosterError(f"{unreadable}: no such file") from None
    except UnicodeDecodeError:
        raise RosterError(
            f"{unreadable}: it is not UTF-8; save it from the LMS or a spreadsheet as UTF-8 CSV"
        ) from None
    except OSError as exc:
        raise RosterError(f"{unreadable}: {exc.strerror or exc}") from None
    except csv.Error as exc:
        raise RosterError(f"{unreadable}: {exc}") from None
    return list(reader.fieldnames), rows


def read_roster(path: Path, lms: str | None = None) -> Roster:
    """The roster's students, or RosterError saying why it cannot be read; with `lms` (a key of `LMS_IDS`), the
    roster must be that LMS's export (the module's docstring)."""
    header, rows = _table(path)
    columns = {name.casefold(): name for name in header}
    known_by = tuple(name.casefold() for name in LMS_IDS[lms]) if lms else (*_IDS, *_LOGIN, *_EMAIL)
    if not any(name in columns for name in (*known_by, *_SUBMISSION)):
        found = ", ".join(map(repr, (one_line(name, 100) for name in header[:12]))) or "none"
        if lms:
            raise RosterError(
                f"{path}: not a {lms.title()} roster: no {', '.join(LMS_IDS[lms])} column (its columns are {found}); "
                f"give the {LMS_EXPORTS[lms]}"
            )
        raise RosterError(
            f"{path}: no column a student is known by: a roster needs one of {', '.join((*known_by, *_SUBMISSION))} "
            f"(case ignored); its columns are {found}"
        )
    students = []
    for line, row in rows:
        ids = tuple(row[columns[name]] for name in _IDS if name in columns and row.get(columns[name]))
        login, email = _pick(row, columns, _LOGIN), _pick(row, columns, _EMAIL)
        submission = _pick(row, columns, _SUBMISSION)
        if not (ids or login or email or submission):
            continue
        name = _pick(row, columns, _NAME) or " ".join(
            filter(None, (_pick(row, columns, _FIRST), _pick(row, columns, _LAST)))
        )
        students.append(Student(name, _pick(row, columns, _IDS), login, email, ids, submission, line, row))
    return Roster(students, tuple(header))


def write_matches(path: Path, matches: Matches, roster: Roster) -> None:
    """Every student and every submission, one row each with what became of it: none is left out."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["student_id", "name", "login", "email", "submission", "status"])
        for student in roster.students:
            names = [n for n, s in matches.students.items() if s == student]
            status = "matched" if len(names) == 1 else f"{len(names)} submissions" if names else "no submission"
            row = [student.id, student.name, student.login, student.email, "; ".join(names), status]
            writer.writerow([csv_cell(cell) for cell in row])
        for name in matches.unknown:
            writer.writerow([csv_cell(cell) for cell in ("", "", "", "", name, "no student matches it")])
        for name, found in matches.ambiguous.items():
            said = f"matches {len(found)} students: {', '.join(s.name or s.id for s in found)}"
            writer.writerow([csv_cell(cell) for cell in ("", "", "", "", name, said)])
