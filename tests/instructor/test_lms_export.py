"""`grader export-grades`: a gradebook's totals as the CSV Canvas or Moodle imports, students found in the roster
the LMS itself exports; what cannot be matched is named and left out, never guessed.

The samples are written from the LMSs' documentation:

- Canvas's Gradebook export, which is also the import's format: Student (Last, First), ID (Canvas's user id),
  SIS User ID, SIS Login ID, Section, then one column per assignment named "Name (id)"
  (https://nemogb-dev.github.io/nemogb-r/articles/detailed-canvas-export-info.html); an import needs a student
  column (Student, ID or SIS User ID), SIS Login ID, Section and the assignment, and a new assignment column
  becomes a new assignment
  (https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/import-csv-file-carmen-grades);
  the export's read-only columns (current and final scores) are ignored on import
  (https://ts.vcu.edu/askit/teaching-and-learning/canvas/faculty/grading-faculty/gradebook-action-menu-faculty/).
  Its second row, "Points Possible", holds each assignment's points.
- Moodle's grade import from CSV: "the import file format is the same as the corresponding export format", the
  user mapped by "Email address" to useremail or "ID number" to useridnumber, the grade columns to grade items
  (https://docs.moodle.org/311/en/Grade_import); the export holds First name, Last name, ID number, Institution,
  Department, Email address, then the grade items.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from grader.cli import main
from grader.instructor import lms_export, roster

GRADEBOOK = [
    ["submission", "ex01_process_group", "ex02_data_sharding", "total", "max_score", "seconds", "problem", "review"],
    ["ada", "6", "4", "10", "12", "3.1", "", ""],
    ["bo", "2", "0", "2", "12", "2.0", "", ""],
    ["bo@uni.example", "5", "0", "5", "12", "2.2", "", ""],  # bo handed in twice, under two of his ids
    ["cy.x@uni.example", "12", "0", "12", "12", "2.9", "", ""],
    ["lee", "7", "0", "7", "12", "2.5", "", ""],  # one student's login, another's e-mail address
    ["zed", "1", "0", "1", "12", "1.0", "", ""],  # in no roster
]
CANVAS_ROSTER = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Week 1 (4567)", "Current Score", "Final Score"],
    ["    Points Possible", "", "", "", "", "12.00", "(read only)", "(read only)"],
    ["Lovelace, Ada", "101", "A001", "ada", "Section 1", "", "", ""],
    ["Bolt, Bo", "102", "A002", "bo@uni.example", "Section 1", "", "", ""],
    ['=HYPERLINK("x"), Cy', "103", "A003", "cy.x@uni.example", "Section 2", "", "", ""],
    ["Lee, Kim", "104", "A004", "lee", "Section 2", "", "", ""],
    ["Park, Lee", "105", "A005", "lee@uni.example", "Section 2", "", "", ""],
    ["Dee, Nora", "106", "A006", "nora", "Section 1", "", "", ""],
    ["Student, Test", "999", "", "f1a2b3", "Section 1", "", "", ""],
]
MOODLE_ROSTER = [
    ["First name", "Last name", "ID number", "Institution", "Department", "Email address", "Quiz: Week 1 (Real)"],
    ["Ada", "Lovelace", "A001", "Uni", "CS", "ada@uni.example", "-"],
    ["Bo", "Bolt", "A002", "Uni", "CS", "bo@uni.example", "-"],
    ["Cy", "Xu", "A003", "Uni", "CS", "cy.x@uni.example", "-"],
]


def write(path: Path, rows: list[list[str]], encoding: str = "utf-8") -> Path:
    with path.open("w", newline="", encoding=encoding) as handle:
        csv.writer(handle).writerows(rows)
    return path


def export(tmp_path: Path, roster: list[list[str]], form: str, *extra: str) -> tuple[int, list[list[str]]]:
    out = tmp_path / "grades" / f"{form}.csv"
    book = write(tmp_path / "gradebook.csv", GRADEBOOK)
    code = main(
        ["export-grades", str(book), "--roster", str(write(tmp_path / "roster.csv", roster, "utf-8-sig"))]
        + ["--format", form, "--out", str(out), *extra]
    )
    return code, list(csv.reader(out.open(encoding="utf-8"))) if out.exists() else []


def test_canvas_gets_its_gradebook_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its five student columns, the assignment's existing `Week 1 (4567)` column (so the grades go to it), the
    Points Possible row, then each matched student; a roster name that would be a formula stays text."""
    code, rows = export(tmp_path, CANVAS_ROSTER, "canvas", "--assignment", "Week 1")
    assert rows == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Week 1 (4567)"],
        ["Points Possible", "", "", "", "", "12"],
        ["Lovelace, Ada", "101", "A001", "ada", "Section 1", "10"],
        ['\'=HYPERLINK("x"), Cy', "103", "A003", "cy.x@uni.example", "Section 2", "12"],
    ]
    captured = capsys.readouterr()
    assert code == 1
    assert "2 student(s) written to" in captured.out and "out of 12 points" in captured.out
    assert "4 roster student(s) with no submission, not in the file: Lee, Kim; Park, Lee; Dee, Nora; Student, Test" in (
        captured.out
    )
    assert captured.err.splitlines() == [
        "grader export-grades: left out, in no roster row: zed",
        "grader export-grades: left out, of several roster students: lee: Lee, Kim; Park, Lee",
        "grader export-grades: left out, several submissions of one student: Bolt, Bo: bo, bo@uni.example",
        "grader export-grades: name the submissions as the roster's ids, or add a `submission` column to the "
        "roster, and export again",
    ]


def test_a_new_canvas_assignment_and_a_submission_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An assignment the roster lacks is a column of its own name (Canvas makes the assignment); a `submission`
    column names each student's submission where the ids do not, and is then the only match."""
    roster = [row + [cell] for row, cell in zip(CANVAS_ROSTER, ["submission", "", "ada", "zed", "", "lee", "", "", ""])]
    code, rows = export(tmp_path, roster, "canvas", "--assignment", "Quiz 2")
    assert rows[0][-1] == "Quiz 2" and rows[1] == ["Points Possible", "", "", "", "", "12"]
    assert {row[0]: row[-1] for row in rows[2:]} == {"Lovelace, Ada": "10", "Bolt, Bo": "1", "Lee, Kim": "7"}
    assert code == 1 and "in no roster row: bo\n" in capsys.readouterr().err


def test_moodle_gets_its_grade_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The roster's identity columns (Email address and ID number are what the import maps users by), then the
    grade item; an e-mail address matches by the part before the @ too."""
    code, rows = export(tmp_path, MOODLE_ROSTER, "moodle", "--assignment", "Exercises")
    assert rows == [
        ["First name", "Last name", "ID number", "Email address", "Exercises"],
        ["Ada", "Lovelace", "A001", "ada@uni.example", "10"],
        ["Cy", "Xu", "A003", "cy.x@uni.example", "12"],
    ]
    err = capsys.readouterr().err
    assert code == 1 and "several submissions of one student: A002: bo, bo@uni.example" in err
    assert "in no roster row: lee" in err and "in no roster row: zed" in err


def test_every_submission_matched_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    roster = [MOODLE_ROSTER[0], MOODLE_ROSTER[1]]
    book = write(tmp_path / "gradebook.csv", GRADEBOOK[:2])
    out = tmp_path / "moodle.csv"
    argv = ["export-grades", str(book), "--roster", str(write(tmp_path / "r.csv", roster)), "--format", "moodle"]
    assert main([*argv, "--out", str(out)]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("roster", "form", "message"),
    [
        (MOODLE_ROSTER, "canvas", "not a Canvas roster: no SIS Login ID, SIS User ID, ID column"),
        (
            [["Student", "Section"], ["Ada", "1"]],
            "moodle",
            "not a Moodle roster: no Username, ID number, Email address",
        ),
    ],
)
def test_a_roster_of_another_lms_is_refused_in_a_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], roster: list[list[str]], form: str, message: str
) -> None:
    code, rows = export(tmp_path, roster, form)
    assert code == 2 and rows == []
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_missing_gradebook_or_roster_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    roster = write(tmp_path / "r.csv", MOODLE_ROSTER)
    argv = ["--roster", str(roster), "--format", "moodle", "--out", str(tmp_path / "o.csv")]
    assert main(["export-grades", str(tmp_path / "none"), *argv]) == 2
    assert "none: no such file or folder" in capsys.readouterr().err
    book = write(tmp_path / "gradebook.csv", GRADEBOOK)
    assert main(["export-grades", str(book), "--roster", str(tmp_path / "nope.csv"), *argv[2:]]) == 2
    assert "roster" in capsys.readouterr().err


def test_the_roster_is_read_by_the_one_roster_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`grader grade --roster` and `export-grades` read rosters alike: through grader/instructor/roster.py, the
    export holding no CSV reader of its own."""
    read: list[tuple[Path, str | None]] = []

    def reading(path: Path, lms: str | None = None) -> roster.Roster:
        read.append((path, lms))
        return real(path, lms)

    real = roster.read_roster
    monkeypatch.setattr(roster, "read_roster", reading)
    code, rows = export(tmp_path, MOODLE_ROSTER, "moodle")
    assert read == [(tmp_path / "roster.csv", "moodle")] and rows[1][:2] == ["Ada", "Lovelace"]
    source = Path(lms_export.__file__).read_text()
    assert "csv.reader" not in source and "DictReader" not in source
