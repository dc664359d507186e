"""The class roster (grader/instructor/roster.py) and `grader grade --roster`: each submission's student id in the
gradebook, and every submission no student matches and every student without a submission said, never dropped."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from grader.instructor.roster import RosterError, read_roster

from . import support

# Canvas's gradebook export (Grades > Export): Student ("Last, First"), ID (the Canvas user id, which its
# submission downloads carry), SIS User ID, SIS Login ID, Section, then the assignments, and a "Points Possible"
# row first: https://nemogb-dev.github.io/nemogb-r/articles/detailed-canvas-export-info.html
CANVAS = (
    "Student,ID,SIS User ID,SIS Login ID,Section,Week 1 (870001)\n"
    "    Points Possible,,,,,10\n"
    '"Smith, John",12345,S-001,jsmith,Distributed 101,\n'
    '"Lee, Ann",12346,S-002,alee,Distributed 101,\n'
    '"Student, Test",12399,,,Distributed 101,\n'
)
# Moodle's participants or grades download: First name, Last name / Surname, ID number, Username, Email address
MOODLE = (
    "First name,Surname,ID number,Username,Email address\n"
    "John,Smith,S-001,jsmith,john.smith@uni.example\n"
    "Ann,Lee,S-002,alee,ann.lee@uni.example\n"
)


def _roster(tmp_path: Path, text: str, name: str = "roster.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8-sig")  # spreadsheets write a byte-order mark
    return path


def test_a_canvas_export_is_read_as_it_comes(tmp_path: Path) -> None:
    roster = read_roster(_roster(tmp_path, CANVAS))
    assert [(s.name, s.id, s.login, s.ids) for s in roster.students] == [
        ("Smith, John", "12345", "jsmith", ("12345", "S-001")),
        ("Lee, Ann", "12346", "alee", ("12346", "S-002")),
        ("Student, Test", "12399", "", ("12399",)),
    ]
    assert roster.students[0].row["Section"] == "Distributed 101"  # kept for a grade export


def test_columns_are_matched_whatever_their_case_and_a_moodle_export_is_read_too(tmp_path: Path) -> None:
    roster = read_roster(_roster(tmp_path, MOODLE.replace("Email address", "EMAIL ADDRESS ")))
    john = roster.students[0]
    assert (john.name, john.id, john.login, john.email) == ("John Smith", "S-001", "jsmith", "john.smith@uni.example")


def test_a_spreadsheet_s_semicolons_and_a_submission_column_are_read(tmp_path: Path) -> None:
    """Some spreadsheets save CSV with semicolons; a `submission` column ties a student to a name nothing else
    tells (the name a student gave a folder)."""
    roster = read_roster(_roster(tmp_path, "Name;Email;Submission\nAnn Lee;ann@uni.example;team-rocket\n"))
    (ann,) = roster.students
    assert (ann.name, ann.email, ann.submission) == ("Ann Lee", "ann@uni.example", "team-rocket")
    assert roster.match("Team-Rocket") == [ann] and roster.match("ann@uni.example") == [ann]


def test_a_roster_without_a_column_students_are_known_by_is_refused_in_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(RosterError) as refused:
        read_roster(_roster(tmp_path, "Student,Score\nAnn,3\n"))
    assert "no column a student is known by" in str(refused.value) and "'Student', 'Score'" in str(refused.value)
    with pytest.raises(RosterError, match="cannot be read as a CSV roster"):
        read_roster(tmp_path / "absent.csv")


@pytest.mark.parametrize(
    ("submission", "student"),
    [
        ("jsmith", "Smith, John"),  # a login
        ("S-002", "Lee, Ann"),  # an SIS id
        ("smithjohn_12345_67890_ex03_train_ddp", "Smith, John"),  # Canvas's download name: its user id
        ("leeann_LATE_12346_67891_repo", "Lee, Ann"),
        ("smith, john", "Smith, John"),  # the name, punctuation and case aside
    ],
)
def test_a_submission_is_matched_by_its_name(tmp_path: Path, submission: str, student: str) -> None:
    (found,) = read_roster(_roster(tmp_path, CANVAS)).match(submission)
    assert found.name == student


def test_a_moodle_folder_is_matched_by_the_student_s_name(tmp_path: Path) -> None:
    """Moodle names each student's folder `<full name>_<participant id>_assignsubmission_file_`
    (`download_submissions` in mod/assign/locallib.php: clean_filename(fullname . '_' . uniqueid) . '_' . plugin)."""
    (found,) = read_roster(_roster(tmp_path, MOODLE)).match("Ann Lee_4417723_assignsubmission_file_")
    assert found.login == "alee"


def test_unknown_ambiguous_shared_and_missing_are_each_said(tmp_path: Path) -> None:
    twins = CANVAS + '"Smith, John",12347,S-003,jsmith2,Distributed 101,\n'
    roster = read_roster(_roster(tmp_path, twins))
    matches = roster.match_all(["jsmith", "S-001", "smith_john", "stranger"])
    assert matches.student_ids() == {"jsmith": "12345", "S-001": "12345"}
    assert matches.unknown == ["stranger"] and list(matches.ambiguous) == ["smith_john"]
    assert [s.name for s in matches.missing] == ["Lee, Ann", "Student, Test", "Smith, John"]
    assert matches.lines() == [
        "1 submission(s) match no student of the roster: stranger",
        "submission smith_john matches 2 students (Smith, John (12345), Smith, John (12347))",
        "Smith, John (12345) is matched by 2 submissions: jsmith, S-001",
        "3 student(s) handed in nothing: Lee, Ann (12346), Student, Test (12399), Smith, John (12347)",
    ]


def test_grade_with_a_roster_gives_each_row_its_student_and_leaves_no_one_out(tmp_path: Path) -> None:
    subs = tmp_path / "submissions"
    (subs / "jsmith").mkdir(parents=True)
    shutil.copyfile(support.SOLUTIONS / "ex01_process_group.py", subs / "jsmith" / "ex01_process_group.py")
    canvas_file = subs / "leeann_12346_67891_ex01_process_group.py"  # one file handed in through Canvas
    shutil.copyfile(support.SOLUTIONS / "ex01_process_group.py", canvas_file)
    shutil.copytree(subs / "jsmith", subs / "stranger")
    out = tmp_path / "out"
    done = support.run_grader(
        support.REPO,
        "grade",
        *sorted(map(str, subs.iterdir())),
        "--out",
        str(out),
        "--roster",
        str(_roster(tmp_path, CANVAS)),
        "--exercises",
        "ex01",
        "--world-size",
        "2",
        "--no-sandbox",
        "-j",
        "2",
    )
    assert done.returncode == 0, done.stderr
    rows = {row["submission"]: row for row in csv.DictReader((out / "gradebook.csv").open())}
    assert {name: row["student_id"] for name, row in rows.items()} == {
        "jsmith": "12345",
        "leeann_12346_67891_ex01_process_group": "12346",
        "stranger": "",
    }
    assert all(float(row["total"]) == float(row["max_score"]) > 0 for row in rows.values())
    statuses = [(r["student_id"], r["submission"], r["status"]) for r in csv.DictReader((out / "roster.csv").open())]
    assert statuses == [
        ("12345", "jsmith", "matched"),
        ("12346", "leeann_12346_67891_ex01_process_group", "matched"),
        ("12399", "", "no submission"),
        ("", "stranger", "no student matches it"),
    ]
    assert "grader grade: roster: 1 submission(s) match no student of the roster: stranger" in done.stderr
    assert "grader grade: roster: 1 student(s) handed in nothing: Student, Test (12399)" in done.stderr
