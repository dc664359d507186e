"""grades.jsonl: every check's result, read back as written; and `grader report` drawn from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.cli import main
from grader.instructor.grade_log import GradeLog, GradeLogError, read_grades
from grader.instructor.submission_grade import SubmissionGrade
from grader.judge.names import Cause
from grader.judge.runner import CheckResult

from . import support


def _grade(name: str, passed: bool = True) -> SubmissionGrade:
    result = CheckResult(
        "passed" if passed else "failed",
        "" if passed else "rank 1 joined as rank 0",
        exercise="ex01_process_group",
        check="joins_group",
        world_size=2,
        seconds=0.2,
        points=1.0 if passed else 0.0,
        max_points=1.0,
        visibility="public",
        details="d",
        hint_number=None if passed else 2,
        notes=["n"],
        cause="" if passed else Cause("wrong_rank"),  # a proven cause travels with the result
    )
    return SubmissionGrade(name, [result], 1.25, "" if passed else "a problem")


def test_grades_come_back_as_they_were_written(tmp_path: Path) -> None:
    grades = [_grade("ada"), _grade("bo", passed=False)]
    with GradeLog(tmp_path / "grades.jsonl") as log:
        for grade in grades:
            log.on_result(grade)
    assert read_grades(tmp_path / "grades.jsonl") == grades
    assert read_grades(tmp_path / "grades.jsonl")[1].results[0].cause == "wrong_rank"


def test_a_line_cut_off_by_an_interrupted_batch_is_dropped_only_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "grades.jsonl"
    with GradeLog(path) as log:
        log.on_result(_grade("ada"))
        log.on_result(_grade("bo"))
    whole = path.read_text()
    path.write_text(whole[:-40])
    assert [g.name for g in read_grades(path)] == ["ada"]
    lines = whole.splitlines()
    path.write_text(lines[0][:30] + "\n" + lines[1] + "\n")
    with pytest.raises(GradeLogError, match="line 1"):
        read_grades(path)


def test_the_report_command_draws_several_runs_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GRADER_COURSE", str(support.REPO))
    for run, names in (("run1", ["ada", "bo"]), ("run2", ["cy"])):
        with GradeLog(tmp_path / run / "grades.jsonl") as log:
            for name in names:
                log.on_result(_grade(name, passed=name != "bo"))
    page = tmp_path / "class.html"
    assert main(["report", str(tmp_path / "run1"), str(tmp_path / "run2"), "--out", str(page), "--no-plots"]) == 0
    html = page.read_text()
    assert "3 submissions" in html and "rank # joined as rank #" not in html and "rank 1 joined as rank 0" in html
    assert "ex02_data_sharding" not in html  # only the exercises graded
    assert main(["report", str(tmp_path / "run1"), str(tmp_path / "run1"), "--out", str(page)]) == 2
    assert main(["report", str(tmp_path), "--out", str(page)]) == 2
    assert "no grades.jsonl in" in capsys.readouterr().err
