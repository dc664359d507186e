"""docs/INSTRUCTORS.md's "During the term", walked end to end: grade with a roster, review, feedback, regrade,
export, a dispute settled by an override, export again. Each command is the section's own, with the options a
test needs (exercise 1 at W=2, no sandbox: the sandbox is not the point); each step must succeed and leave what
the section says it leaves."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from . import support

DOC = support.REPO / "docs" / "INSTRUCTORS.md"
ONE_EXERCISE = ("--exercises", "ex01", "--world-size", "2", "--deadline", "60", "--timeout", "600")
ROSTER = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"],
    ["    Points Possible", "", "", "", ""],
    ["Lovelace, Ada", "101", "A001", "alice", "Section 1"],
    ["Bolt, Bo", "102", "A002", "bo", "Section 1"],
]


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split("## During the term", 1)[1].split("\n## ", 1)[0]


def _commands(section: str) -> list[str]:
    """The `grader ...` commands the section shows between backticks, in order."""
    return [found.split(" ", 1)[1] for found in re.findall(r"`(grader [^`]+)`", section)]


def _ok(course: Path, *args: str) -> str:
    done = support.run_grader(course, *args, timeout=900)
    assert done.returncode == 0, f"grader {' '.join(args)}: {done.stderr}"
    assert "Traceback" not in done.stderr
    return done.stdout


def test_the_section_names_each_step_and_its_command() -> None:
    section = _section()
    for step in ("Grade", "Review", "Feedback", "Regrade", "Export", "Disputes"):
        assert f"**{step}" in section
    verbs = [command.split()[0] for command in _commands(section)]
    assert verbs == ["grade", "similarity", "regrade", "export-grades", "override"]


def test_a_week_of_the_term_runs_as_the_section_says(tmp_path: Path) -> None:
    course = support.course_copy(tmp_path / "course")
    subs = [support.solutions(tmp_path / "subs" / "alice"), support.stubs(tmp_path / "subs" / "bo")]
    roster = tmp_path / "roster.csv"
    with roster.open("w", newline="") as handle:
        csv.writer(handle).writerows(ROSTER)
    week, again = tmp_path / "week3", tmp_path / "week3-r1"
    _ok(course, "grade", *map(str, subs), "--out", str(week), "--roster", str(roster), "--no-sandbox", *ONE_EXERCISE)
    for made in ("batch.json", "gradebook.csv", "report.html", "alice/feedback.html", "bo/feedback.md"):
        assert (week / made).is_file(), made
    said = _ok(course, "regrade", str(week), "--out", str(again), "--no-sandbox")
    assert not (again / "gradebook.csv").exists() and (again / "regrade.md").is_file()
    assert "0" in said.splitlines()[-1]  # an unchanged course: no row would change
    _ok(course, "regrade", str(week), "--out", str(again), "--no-sandbox", "--accept")
    canvas = tmp_path / "canvas.csv"
    _ok(course, "export-grades", str(again), "--roster", str(roster), "--format", "canvas", "--out", str(canvas))
    before = {row[3]: row[-1] for row in csv.reader(canvas.open())}
    _ok(course, "override", str(again), "bo", "ex01", "1", "--note", "regraded by hand after a dispute")
    _ok(course, "export-grades", str(again), "--roster", str(roster), "--format", "canvas", "--out", str(canvas))
    after = {row[3]: row[-1] for row in csv.reader(canvas.open())}
    assert after["alice"] == before["alice"] and float(after["bo"]) == float(before["bo"]) + 1
