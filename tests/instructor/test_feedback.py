"""The feedback pages `grader grade` writes for students (OUT/<submission>/feedback.html and .md) and
`grader feedback OUT` writes again: each check's verdict, message and hint, hidden checks as
--hidden-visibility says, nothing for instructors only, and a student's text inert in both formats."""

from __future__ import annotations

import csv
import dataclasses
import html
import re
import shutil
from pathlib import Path
from urllib.parse import quote

import pytest

from grader.catalog import Catalog, load_catalog
from grader.cli import main
from grader.instructor import feedback, gradescope, manifest
from grader.instructor.grade_log import GradeLog
from grader.instructor.submission_grade import SubmissionGrade
from grader.instructor.tamper_scan import ReviewMark
from grader.judge.verdict import CheckResult

from . import support

CATALOG = load_catalog(support.REPO)
CHEAP = dataclasses.replace(CATALOG, exercises=CATALOG.exercises[:2])
SUBMISSIONS = ("correct", "no_set_epoch", "seed_ignored", "marked")
HOSTILE = "```\n<script>alert(1)</script>\n=cmd|' /C calc'!A0 \x1b[2J\x1b]52;c;cGF3bmVk\x07 \r\u202e ````` TAILMARK"


@pytest.fixture(scope="module")
def batch(hidden_course: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("feedback")
    support.solutions(folder / "correct")
    support.with_mistake(folder / "no_set_epoch", "ex02_data_sharding.py", "forgot_set_epoch")
    support.with_mistake(folder / "seed_ignored", "ex02_data_sharding.py", "seed_ignored")  # the hidden check fails
    marked = folder / "marked"  # the solution, with a forgery's primitive it never calls: the tamper scan marks it
    marked.mkdir()
    source = (support.SOLUTIONS / "ex01_process_group.py").read_text()
    (marked / "ex01_process_group.py").write_text(source + "\nimport gc\n\n_referrers = gc.get_referrers\n")
    out = folder / "out"
    done = support.run_grader(
        hidden_course,
        "grade",
        *(str(folder / name) for name in SUBMISSIONS),
        *("--out", str(out), "--exercises", support.CHEAP_EXERCISES, "--world-size", "2", "-j", "2"),
        *("--deadline", "10", "--no-sandbox"),
    )
    assert done.returncode == 0, done.stderr
    return out


def _pages(out: Path, name: str) -> tuple[str, str]:
    return (out / name / "feedback.html").read_text(), (out / name / "feedback.md").read_text()


def _outside_fences(markdown: str) -> str:
    """The Markdown's lines outside its fenced code blocks, closed as CommonMark closes them: by a line of at
    least as many backticks as the opening fence."""
    outside, fence = [], 0
    for line in markdown.splitlines():
        if fence:
            closing = re.fullmatch(r" {0,3}(`+)\s*", line)
            fence = 0 if closing and len(closing[1]) >= fence else fence
            continue
        opening = re.match(r" {0,3}(`{3,})", line)
        if opening:
            fence = len(opening[1])
        else:
            outside.append(line)
    return "\n".join(outside)


def test_the_batch_writes_each_submission_its_pages_with_the_failures_message_and_hint(batch: Path) -> None:
    for name in SUBMISSIONS:
        assert (batch / name / "results.json").is_file() and all(p for p in _pages(batch, name)), name
    page, markdown = _pages(batch, "no_set_epoch")
    hint = CATALOG.get("ex02").hints[1].text.strip()
    message = "forgot set_epoch: epoch 1 repeats epoch 0's order on every rank"
    for text in (html.unescape(page), markdown):
        assert message in text and hint in text
        assert "grader hint ex02_data_sharding 2" in text and "Score: 9 / 10" in text
        assert "ex02_data_sharding.py (named as in the course)" in text
    assert '<span class="verdict-failed">failed</span>, 0 / 1' in page
    assert "### `reshuffles_each_epoch` at W=2: failed, 0 / 1" in markdown
    correct, _ = _pages(batch, "correct")
    assert "Score: 10 / 10" in correct and 'class="verdict-failed"' not in correct and "Hint:" not in correct
    report = (batch / "report.html").read_text()
    section = report[report.index('id="feedback"') :]
    for name in SUBMISSIONS:
        assert f'<td>{name}</td><td><a href="{name}/feedback.html">' in section, name


def test_hidden_checks_are_left_out_by_default_and_shown_when_the_visibility_allows(
    batch: Path, hidden_course: Path, tmp_path: Path
) -> None:
    said = "make_loader ignores its seed"
    for text in _pages(batch, "seed_ignored"):
        assert support.HIDDEN_CHECK not in text and said not in text
        assert "include checks whose results are not shown" in text and "Score: 9 / 10" in text
    shown = tmp_path / "out"
    shutil.copytree(batch, shown)
    done = support.run_grader(hidden_course, "feedback", str(shown), "--hidden-visibility", "after_published")
    assert done.returncode == 0, done.stderr
    assert "8 feedback page(s) written" in done.stdout and "hidden checks shown" in done.stdout
    page, markdown = _pages(shown, "seed_ignored")
    assert f"### `{support.HIDDEN_CHECK}` at W=2 (hidden check): failed, 0 / 1" in markdown and said in markdown
    assert "hidden check</span>" in page and said in page and "not shown" not in page


def test_a_marked_submissions_pages_hold_nothing_of_the_marks(batch: Path) -> None:
    gradebook = (batch / "gradebook.csv").read_text()
    assert "gc.get_referrers" in gradebook  # the scan did mark it
    for text in _pages(batch, "marked"):
        assert "get_referrers" not in text and "review" not in text.lower() and "tamper" not in text.lower()


def test_grader_feedback_rewrites_the_same_pages_from_the_grade_log(
    batch: Path, hidden_course: Path, tmp_path: Path
) -> None:
    again = tmp_path / "out"
    shutil.copytree(batch, again)
    for page in again.glob("*/feedback.*"):
        page.unlink()
    done = support.run_grader(hidden_course, "feedback", str(again), "--format", "md")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in again.glob("*/feedback.*")) == ["feedback.md"] * len(SUBMISSIONS)
    assert support.run_grader(hidden_course, "feedback", str(again)).returncode == 0
    for name in SUBMISSIONS:
        assert _pages(again, name) == _pages(batch, name), name
    elsewhere = tmp_path / "reports" / "report.html"
    assert support.run_grader(hidden_course, "report", str(again), "--out", str(elsewhere)).returncode == 0
    assert '<a href="../out/no_set_epoch/feedback.html">' in elsewhere.read_text()


@pytest.mark.parametrize("setup", ["missing", "no log", "not a log"])
def test_a_bad_out_is_one_sentence(setup: str, hidden_course: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    if setup != "missing":
        out.mkdir()
    if setup == "not a log":
        (out / "grades.jsonl").write_text("not json\n{}\n")
    done = support.run_grader(hidden_course, "feedback", str(out))
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.startswith("grader: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.rglob("feedback.*"))


def _grade(name: str, message: str, review: tuple[ReviewMark, ...] = (), tampered: bool = False) -> SubmissionGrade:
    """Every check of exercises 1 and 2 at W=2; the first fails with `message` and its hint."""
    results = []
    for exercise in CHEAP.exercises:
        for index, spec in enumerate(exercise.checks):
            failed = index == 0
            results.append(
                CheckResult(
                    "failed" if failed else "passed",
                    message if failed else "",
                    details=f"Traceback (most recent call last):\n{message}" if failed else "",
                    exercise=exercise.id,
                    check=spec.name,
                    world_size=2,
                    seconds=0.1,
                    points=0.0 if failed else spec.points,
                    max_points=spec.points,
                    visibility=spec.visibility,
                    hint_number=1 if failed else None,
                    notes=["marked: the code under test replaced the grader's code (rank 0: x)"] if tampered else [],
                    tampered=("rank 0: grader.engine.wire.encode was replaced",) if tampered else (),
                )
            )
    return SubmissionGrade(name, results, 1.0, problem=message, review=review, files=[f"ex01: {message}.py"])


def test_a_hostile_name_and_message_stay_inert_in_both_formats(tmp_path: Path) -> None:
    grade = _grade(HOSTILE, HOSTILE)
    folder = tmp_path / gradescope.results_folder(grade.name)
    feedback.write_pages(folder, CHEAP, grade, "hidden", "both")
    page, markdown = _pages(tmp_path, folder.name)
    for text in (page, markdown):
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", text)
        assert "\\x1b[2J" in text and "\\x1b]52;c;cGF3bmVk\\x07" in text and "\\r\\u202e" in text
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "=cmd|&#39; /C calc&#39;!A0" in page
    outside = _outside_fences(markdown)
    assert "<script" not in outside and "=cmd" not in outside and "TAILMARK" not in outside
    assert markdown.count("<script>alert(1)</script>") == 7  # name, problem, files; two messages, two details
    assert "\n``````text\n```\n<script>" in markdown  # longer than the run of five backticks inside


def test_the_pages_of_a_marked_grade_are_those_of_the_same_grade_unmarked(tmp_path: Path) -> None:
    marks = (ReviewMark("ex01_process_group.py", 12, "rebinds grader.engine.wire.encode"),)
    marked = _grade("ada", "wrong", review=marks, tampered=True)
    feedback.write_pages(tmp_path / "marked", CHEAP, marked, "after_published", "both")
    feedback.write_pages(tmp_path / "clean", CHEAP, _grade("ada", "wrong"), "after_published", "both")
    assert _pages(tmp_path, "marked") == _pages(tmp_path, "clean")
    assert "grader.engine" not in "".join(_pages(tmp_path, "marked"))


def test_a_name_with_control_characters_gets_its_pages_in_its_own_results_folder(tmp_path: Path) -> None:
    name = "ada\x1b[31m"  # the log keeps it escaped; batch.json keeps it as given
    manifest.Manifest((name,), tuple(e.id for e in CHEAP.exercises)).write(tmp_path / manifest.FILENAME)
    with GradeLog(tmp_path / "grades.jsonl") as log:
        log.on_result(_grade(name, "wrong"))
    written = feedback.rewrite(tmp_path, CHEAP, "hidden", "both")
    folder = tmp_path / gradescope.results_folder(name)
    assert sorted(written) == [folder / "feedback.html", folder / "feedback.md"]
    assert feedback.links(tmp_path / "report.html", [tmp_path], ["ada\\x1b[31m"]) == [
        ("ada\\x1b[31m", f"{quote(folder.name)}/feedback.html")
    ]


def test_pages_that_cannot_be_written_cost_that_submission_its_pages_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_pages = feedback.write_pages

    def failing_for_b(folder: Path, catalog: Catalog, grade: SubmissionGrade, *args: str) -> list[Path]:
        if grade.name == "b_unwritable":
            raise OSError(28, "No space left on device")
        return write_pages(folder, catalog, grade, *args)

    monkeypatch.setattr(feedback, "write_pages", failing_for_b)
    subs = [support.solutions(tmp_path / "subs" / "a_first"), support.stubs(tmp_path / "subs" / "b_unwritable")]
    out = tmp_path / "out"
    code = main(
        ["grade", *map(str, subs), "--out", str(out), "--no-sandbox", "--exercises", "ex01", "--world-size", "2"]
    )
    said = capsys.readouterr()
    assert code == 1
    rows = {row["submission"]: row for row in csv.DictReader((out / "gradebook.csv").open(newline=""))}
    assert f"{feedback.UNWRITTEN}: OSError" in rows["b_unwritable"]["problem"] and not rows["a_first"]["problem"]
    assert (out / "b_unwritable" / "results.json").is_file() and not list((out / "b_unwritable").glob("feedback.*"))
    assert (out / "a_first" / "feedback.html").is_file() and (out / "a_first" / "feedback.md").is_file()
    assert "1 submission(s)' feedback pages could not be written" in said.err and "b_unwritable" in said.err
    report = (out / "report.html").read_text()
    assert 'href="a_first/feedback.html"' in report and "b_unwritable/feedback" not in report


def test_an_unknown_visibility_is_refused_rather_than_read_as_shown() -> None:
    with pytest.raises(ValueError, match="must be one of"):
        feedback.feedback(CHEAP, _grade("ada", "wrong"), "visible")
