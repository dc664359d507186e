"""The tamper scan's marks in what a batch writes: the gradebook's review column, results.json (where
Gradescope shows students nothing), the grade log and the class report; and never a change of score."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from grader.catalog import load_catalog
from grader.instructor import gradebook, gradescope
from grader.instructor.class_report import write_report
from grader.instructor.class_stats import summarize
from grader.instructor.grade_log import GradeLog, read_grades
from grader.instructor.submission_grade import SubmissionGrade
from grader.instructor.tamper_scan import ReviewMark
from grader.judge.runner import CheckResult

from . import support
from .results_schema import validate_results

CATALOG = load_catalog(support.REPO)
CHEAP = dataclasses.replace(CATALOG, exercises=CATALOG.exercises[:2])
REASON = "rebinds grader.engine.wire.encode: grader.engine.wire is imported"
MARKS = (
    ReviewMark("ex01_process_group.py", 12, REASON),
    ReviewMark("mine.ipynb", 3, "imports ctypes (cell 2, line 1)"),
)


def _grade(name: str, review: tuple[ReviewMark, ...] = ()) -> SubmissionGrade:
    results = [
        CheckResult(
            "passed" if spec.visibility == "public" else "failed",
            "" if spec.visibility == "public" else "hidden reason",
            exercise=exercise.id,
            check=spec.name,
            world_size=w,
            seconds=0.1,
            points=spec.points / len(spec.world_sizes) if spec.visibility == "public" else 0.0,
            max_points=spec.points / len(spec.world_sizes),
            visibility=spec.visibility,
        )
        for exercise in CHEAP.exercises
        for spec in exercise.checks
        for w in spec.world_sizes
    ]
    return SubmissionGrade(name, results, 1.0, review=review)


def _students_view(data: dict) -> str:
    """What Gradescope shows a student: the output and the tests not hidden (after publishing too)."""
    return json.dumps([data["output"], [t for t in data["tests"] if t["visibility"] != "hidden"]])


@pytest.mark.parametrize("hidden_as", gradescope.HIDDEN_VISIBILITIES)
def test_results_json_holds_the_marks_where_students_see_nothing(hidden_as: str) -> None:
    marked = gradescope.results_json(CHEAP, _grade("ada", MARKS), hidden_as)
    clean = gradescope.results_json(CHEAP, _grade("ada"), hidden_as)
    validate_results(marked)
    assert marked["extra_data"]["review"] == [
        {"file": "ex01_process_group.py", "line": 12, "reason": REASON},
        {"file": "mine.ipynb", "line": 3, "reason": "imports ctypes (cell 2, line 1)"},
    ]
    (review,) = [t for t in marked["tests"] if t["name"] == gradescope.REVIEW_TEST]
    assert review["visibility"] == "hidden" and (review["score"], review["max_score"]) == (0, 0)
    assert review["output"].splitlines() == [f"ex01_process_group.py:12: {REASON}", f"mine.ipynb:3: {MARKS[1].reason}"]
    assert "grader.engine" not in _students_view(marked) and "review" not in _students_view(marked)
    assert _students_view(marked) == _students_view(clean)
    assert clean["extra_data"]["review"] == [] and len(clean["tests"]) == len(marked["tests"]) - 1


def test_marks_change_no_score(tmp_path: Path) -> None:
    marked, clean = _grade("ada", MARKS), _grade("bo")
    assert marked.score == clean.score > 0 and marked.max_score == clean.max_score
    assert gradescope.results_json(CHEAP, marked)["score"] == gradescope.results_json(CHEAP, clean)["score"]
    with gradebook.Gradebook(tmp_path / "gradebook.csv", CHEAP) as book:
        book.on_result(marked)
        book.on_result(clean)
    ada, bo = csv.DictReader((tmp_path / "gradebook.csv").open())
    assert {k: v for k, v in ada.items() if k not in ("submission", "review")} == {
        k: v for k, v in bo.items() if k not in ("submission", "review")
    }
    summary = summarize(CHEAP, [marked, clean])
    assert dict(summary.scores) == {"ada": clean.score, "bo": clean.score}


def test_the_gradebook_has_a_review_column(tmp_path: Path) -> None:
    with gradebook.Gradebook(tmp_path / "gradebook.csv", CHEAP) as book:
        book.on_result(_grade("ada", MARKS))
        book.on_result(_grade("bo"))
    rows = {row["submission"]: row for row in csv.DictReader((tmp_path / "gradebook.csv").open())}
    assert list(rows["ada"])[-3:] == ["problem", "review", "overrides"]
    assert rows["ada"]["review"] == f"ex01_process_group.py:12: {REASON}; mine.ipynb:3: {MARKS[1].reason}"
    assert rows["bo"]["review"] == "" and rows["ada"]["problem"] == ""


def test_the_grade_log_keeps_the_marks_for_a_merged_report(tmp_path: Path) -> None:
    with GradeLog(tmp_path / "grades.jsonl") as log:
        log.on_result(_grade("ada", MARKS))
        log.on_result(_grade("bo"))
    ada, bo = read_grades(tmp_path / "grades.jsonl")
    assert ada.review == MARKS and bo.review == ()


def test_a_grade_log_written_before_the_scan_reads_back_without_marks(tmp_path: Path) -> None:
    with GradeLog(tmp_path / "grades.jsonl") as log:
        log.on_result(_grade("ada"))
    record = json.loads((tmp_path / "grades.jsonl").read_text())
    del record["review"]
    (tmp_path / "grades.jsonl").write_text(json.dumps(record) + "\n")
    assert read_grades(tmp_path / "grades.jsonl")[0].review == ()


def test_the_class_report_lists_each_mark_for_review(tmp_path: Path) -> None:
    page = write_report(tmp_path / "report.html", CHEAP, [_grade("bo"), _grade("ada", MARKS)], "C", plots=False)
    text = page.read_text()
    section = text[text.index('id="review"') :]
    assert "<td>ada</td><td><code>ex01_process_group.py:12</code></td>" in section and REASON in section
    assert "<code>mine.ipynb:3</code>" in section and "<td>bo</td>" not in section
    assert "<b>1</b><span>marked for review</span>" in text
    clean = write_report(tmp_path / "clean.html", CHEAP, [_grade("bo")], "C", plots=False).read_text()
    assert "None: the tamper scan marked no line of any submission." in clean
    assert "<b>0</b><span>marked for review</span>" in clean
