"""The class report: its numbers, a self-contained page, and what a browser makes of it."""

from __future__ import annotations

import base64
import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.catalog import load_catalog
from grader.instructor import batch, report_plots
from grader.instructor.class_report import render_report, write_report
from grader.instructor.class_stats import histogram, outcome, pattern, summarize
from grader.instructor.submission_grade import SubmissionGrade
from grader.judge.names import Cause
from grader.judge.runner import CheckResult
from grader.judge.verdict import Status
from grader.plan import GradingPlan

from . import support
from .png import count_colour, read_png

CATALOG = load_catalog(support.REPO)
CHEAP = dataclasses.replace(CATALOG, exercises=CATALOG.exercises[:2])
BROWSER = next(
    (found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))), None
)
SUMMED = "loss summed, not averaged: the first gradient is {} times the reference, the batch size {}"
HANG = "rank 1 did not finish within the 10 s deadline (a hang?) at {}/ex02_data_sharding.py:{}"


Verdicts = dict[str, tuple[Status, str]]  # check name: (status, message)


def _results(exercise_id: str, verdicts: Verdicts | None = None) -> list[CheckResult]:
    """Every check of the exercise at W=2 and 4: passed, unless `verdicts` says (status, message) for it."""
    exercise = CATALOG.get(exercise_id)
    results = []
    for spec in exercise.checks:
        for w in (2, 4):
            status, message = (verdicts or {}).get(spec.name, ("passed", ""))
            share = spec.points / 2
            text = message.format(w, 4 * w, f"/tmp/s{w}", w)
            points = share if status == "passed" else 0.0
            results.append(
                CheckResult(
                    status,
                    text,
                    exercise=exercise.id,
                    check=spec.name,
                    world_size=w,
                    seconds=0.25,
                    points=points,
                    max_points=share,
                    visibility=spec.visibility,
                    hint_number=3,
                )
            )
    return results


def _class() -> list[SubmissionGrade]:
    """Three correct, two with a summed loss, the stub of exercise 2, a hang in it, an unreadable zip."""
    stub: Verdicts = {
        s.name: ("failed", "not implemented yet: make_loader() still raises NotImplementedError")
        for s in CATALOG.get("ex02").checks
    }
    summed: Verdicts = {"joins_group": ("failed", SUMMED)}
    unreadable = "broken.zip is not a readable zip archive"
    grades = [SubmissionGrade(f"good{i}", _results("ex01") + _results("ex02"), 3.0 + i) for i in range(3)]
    grades += [SubmissionGrade(f"summed{i}", _results("ex01", summed) + _results("ex02"), 2.0) for i in range(2)]
    grades.append(SubmissionGrade("stub", _results("ex01") + _results("ex02", stub), 1.0))
    hang: Verdicts = {"shards_are_disjoint": ("failed", HANG)}
    grades.append(SubmissionGrade("hangs", _results("ex01") + _results("ex02", hang), 30.0))
    broken = [
        dataclasses.replace(r, status="error", message=unreadable, points=0.0)
        for r in _results("ex01") + _results("ex02")
    ]
    grades.append(SubmissionGrade("broken", broken, 0.0, unreadable))
    return grades


def test_outcomes_and_blurred_diagnoses() -> None:
    result = _results("ex01", {"joins_group": ("failed", SUMMED)})[0]
    assert outcome(result) == "failed"
    assert pattern(result.message) == (
        "loss summed, not averaged: the first gradient is # times the reference, the batch size #"
    )
    assert pattern(HANG.format("/tmp/x/y", 12)) == pattern(HANG.format("/home/z", 40))
    for message, expected in (
        ("not implemented yet: f()", "not attempted"),
        ("file missing: ex01.py", "not attempted"),
        (HANG, "timed out"),
        ("not run: the submission used up its time limit of 5s", "timed out"),
    ):
        assert outcome(dataclasses.replace(result, message=message)) == expected
    assert outcome(dataclasses.replace(result, status="error", message="boom")) == "error"


def test_diagnoses_group_by_proven_cause_and_fall_back_to_the_blurred_message() -> None:
    """A proven cause is the mistake whatever the wording; two causes worded alike stay two mistakes."""
    first = _results("ex01", {"joins_group": ("failed", "the loss is {} times the reference")})[0]
    worded = {
        "a": ("the loss is 2 times the reference", "summed"),
        "b": ("gradients at step 7 came out 4x too large", "summed"),
        "c": ("rank 1 stopped at step 3", "forgot_barrier"),
        "d": ("rank 0 stopped at step 5", "exited_early"),
        "e": ("the loss is 3 times the reference", ""),
        "f": ("the loss is 5 times the reference", ""),
    }
    grades = [
        SubmissionGrade(name, [dataclasses.replace(first, message=message, cause=Cause(cause))], 1.0)
        for name, (message, cause) in worded.items()
    ]
    groups = {d.submissions for d in summarize(CHEAP, grades).diagnoses}
    assert groups == {("a", "b"), ("c",), ("d",), ("e", "f")}


def test_histogram_bins_cover_zero_to_the_maximum() -> None:
    bins = histogram([0, 0.5, 5, 9.99, 10], 10)
    assert len(bins) == 10 and bins[0].low == 0 and bins[-1].high == 10
    assert [b.count for b in bins] == [2, 0, 0, 0, 0, 1, 0, 0, 0, 2]
    assert [b.count for b in histogram([3, 7], 7)] == [0, 0, 0, 1, 0, 0, 1]


def test_the_summary_counts_submissions_not_world_sizes() -> None:
    summary = summarize(CHEAP, _class(), wall_seconds=42.0)
    assert summary.submissions == 8 and summary.max_score == 10
    (summed,) = [d for d in summary.diagnoses if d.message.startswith("loss summed")]
    assert summed.submissions == ("summed0", "summed1") and summed.check == "joins_group" and summed.hint == 3
    assert not [d for d in summary.diagnoses if "not implemented" in d.message or "zip" in d.message]
    ex02 = summary.exercises[1]
    assert (ex02.passed, ex02.graded, ex02.counts["not attempted"], ex02.counts["timed out"]) == (5, 8, 1, 1)
    assert [(t.submission, t.kind, t.where) for t in summary.troubles] == [
        ("broken", "error", "submission"),
        ("hangs", "timed out", "ex02_data_sharding"),
    ]
    assert summary.slowest[0] == ("hangs", 30.0) and summary.full_marks == 3 and summary.zero == 1
    hidden = [c for c in summary.checks if c.hidden]
    assert [c.check for c in hidden] == [support.HIDDEN_CHECK]


@pytest.mark.parametrize("plots", [False, True])
def test_the_page_is_self_contained_and_escapes_what_students_wrote(plots: bool) -> None:
    if plots and not report_plots.available():
        pytest.skip("matplotlib (the plots extra) is not installed")
    grades = _class()
    grades[0] = dataclasses.replace(grades[0], name="<img src=x onerror=alert(1)>")
    html = render_report(summarize(CHEAP, grades), "Class report", plots=plots)
    for reference in ("http://", "https://", "<link", "<script", "@import", "url("):
        assert reference not in html
    assert "<img src=x" not in html and "&lt;img src=x" in html
    if plots:
        uri = re.search(r'<figure id="histogram"><img src="data:image/png;base64,([^"]+)"', html)
        assert uri and base64.b64decode(uri[1]).startswith(b"\x89PNG")
    else:
        assert '<table id="histogram">' in html and "<img" not in html.replace("&lt;img", "")


def headless(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    command = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
    ]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.mark.skipif(BROWSER is None, reason="no chromium or chrome on PATH (apt-get install chromium)")
@pytest.mark.parametrize("plots", [False, True])
def test_a_browser_renders_the_report_with_its_histogram(plots: bool, tmp_path: Path) -> None:
    if plots and not report_plots.available():
        pytest.skip("matplotlib (the plots extra) is not installed")
    page = write_report(tmp_path / "report.html", CHEAP, _class(), "Class report", 12.0, plots=plots)
    shot = tmp_path / "report.png"
    result = headless(tmp_path, f"--screenshot={shot}", "--window-size=1000,1300", page.as_uri())
    assert shot.is_file(), result.stderr[-2000:]
    image = read_png(shot)
    assert image.shape[:2] == (1300, 1000)
    ink = (image[..., :3] < 200).any(axis=-1).mean()
    assert ink > 0.02, f"the page looks blank: {ink:.1%} of it is not white"
    bars = count_colour(image, report_plots.HISTOGRAM_COLOR)
    assert bars > 2000, f"no histogram on the screen: {bars} pixels of its colour"
    if keep := os.environ.get("REPORT_SCREENSHOT"):
        shutil.copy(shot, f"{keep}-{'plots' if plots else 'plain'}.png")


class _NoEngines:
    """A batch's engines, for submissions that never get as far as grading."""

    def borrow(self) -> None:
        raise AssertionError("a submission with nothing to grade borrowed an engine")


def test_a_submission_holding_no_exercise_s_file_is_an_error_said_never_not_attempted(tmp_path: Path) -> None:
    """Issue 34: files named past recognition scored 0 with an empty problem and counted as "not attempted"."""
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "exercise1.py").write_text("x = 1\n")
    plan = GradingPlan(jobs=1, hidden=True)
    grade = batch.grade_one(_NoEngines(), batch._Batch(CHEAP, plan, None, None, None), tmp_path / "alice")  # type: ignore[arg-type]
    assert grade.problem == (
        "nothing handed in is an exercise's file: found exercise1.py; expected files named like "
        "ex01_process_group.py or ex02_data_sharding.py (in any folder, zipped or not), or their notebooks"
    )
    summary = summarize(CHEAP, [grade, SubmissionGrade("bob", _results("ex01_process_group"), 1.0)])
    assert [(row.exercise, row.counts) for row in summary.exercises] == [
        ("ex01_process_group", {"error": 1, "passed": 1}),
        ("ex02_data_sharding", {"error": 1}),
    ]
    assert [(t.submission, t.kind, t.where, t.message) for t in summary.troubles] == [
        ("alice", "error", "submission", grade.problem)
    ]
    assert grade.problem in render_report(summary, "Class report", plots=False).replace("&#39;", "'")
