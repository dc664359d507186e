"""What writes a submission's row can fail too (a results folder that cannot be written, a report that
raises): that costs its own output, never the other rows, and `grader grade` says so and exits 1."""

from __future__ import annotations

import csv
import dataclasses
import json
import stat
from pathlib import Path

import pytest

from grader.catalog import load_catalog
from grader.cli import main
from grader.instructor import class_report, gradescope
from grader.instructor.batch import grade_batch
from grader.instructor.submission_grade import SubmissionGrade
from grader.plan import GradingPlan

from . import support


def _batch(folder: Path) -> list[Path]:
    return [
        support.solutions(folder / "a_first"),
        support.stubs(folder / "b_unwritable"),
        support.solutions(folder / "c_last"),
    ]


def test_a_row_whose_writing_fails_costs_that_output_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write = gradescope.write

    def failing_for_b(path: Path, *args: object, **kwargs: object) -> None:
        if path.parent.name == "b_unwritable":
            raise OSError(28, "No space left on device")
        write(path, *args, **kwargs)  # type: ignore[arg-type]

    def failing_report(*args: object, **kwargs: object) -> Path:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(gradescope, "write", failing_for_b)
    monkeypatch.setattr(class_report, "write_report", failing_report)
    out = tmp_path / "out"
    code = main(
        [
            "grade",
            *map(str, _batch(tmp_path / "subs")),
            "--out",
            str(out),
            "--no-sandbox",
            "--exercises",
            "ex01",
            "--world-size",
            "2",
        ]
    )
    said = capsys.readouterr()
    assert code == 1
    assert stat.S_IMODE(out.stat().st_mode) == 0o700  # the results folder is closed to other users
    with open(out / "gradebook.csv", newline="") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    assert sorted(rows) == ["a_first", "b_unwritable", "c_last"]
    assert "its results.json could not be written: OSError" in rows["b_unwritable"]["problem"]
    for name in ("a_first", "c_last"):
        assert json.loads((out / name / "results.json").read_text())["score"] == 5.0
    assert not (out / "b_unwritable" / "results.json").exists()
    assert "the class report could not be written: RecursionError" in said.err
    assert "1 results.json could not be written" in said.err and "b_unwritable" in said.err
    assert "Traceback" not in said.err + said.out


def test_hooks_that_raise_cost_no_grade(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog = dataclasses.replace(load_catalog(support.REPO), exercises=(load_catalog(support.REPO).get("ex01"),))
    paths = _batch(tmp_path / "subs")
    told: list[str] = []

    class Sink:
        def on_start(self, name: str) -> None:
            if name == "a_first":
                raise UnicodeEncodeError("utf-8", name, 0, 1, "surrogates not allowed")

        def on_result(self, grade: SubmissionGrade) -> None:
            if grade.name == "b_unwritable":
                raise ValueError("a row that cannot be drawn")
            told.append(grade.name)

        def close(self) -> None:
            raise AssertionError("the caller closes its sinks, not the batch")

    plan = GradingPlan(jobs=1, world_sizes=(2,), deadline=20, hidden=True)
    grades = grade_batch(catalog, paths, plan, None, [Sink()])
    assert [g.name for g in grades] == ["a_first", "b_unwritable", "c_last"]
    assert [g.score for g in grades] == [5.0, 0.0, 5.0] and sorted(told) == ["a_first", "c_last"]
    err = capsys.readouterr().err
    assert "announcing a submission failed: UnicodeEncodeError" in err
    assert "reporting b_unwritable failed: ValueError: a row that cannot be drawn" in err
