"""Feedback pages to send students: `OUT/<submission>/feedback.html` and `feedback.md`, beside results.json.

One page per submission, for its student, outside Gradescope: the total and each exercise's score, the file
graded for each exercise, the submission's problem, then every check with its verdict, points, message, the
hint it points at and the student's own traceback. `grader grade` writes them as it grades (`FeedbackPages`);
`grader feedback OUT` writes them again from `OUT/grades.jsonl` (`rewrite`, shards included). Both draw the
page from the grade as the log keeps it (`grade_log.as_logged`), so the two are the same page.

Hidden checks follow `--hidden-visibility` as results.json does: under "hidden" a hidden check's name,
message and details never appear (its points are in the scores, as on Gradescope). What is for instructors
only never does either: the tamper scan's marks, the runtime's tamper notes, similarity.

What the student's code wrote is shown, never obeyed: control characters escaped (`printable`), each text
cut to `TEXT_LIMIT` characters; the HTML page is autoescaped and runs no script; the Markdown page holds
such text only in fenced blocks whose fence is longer than any run of backticks inside, and the course's
own prose with every Markdown character backslash-escaped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from grader.catalog import Catalog, Exercise
from grader.instructor import grade_log, gradescope, manifest
from grader.instructor.class_stats import outcome
from grader.instructor.submission_grade import SubmissionGrade
from grader.instructor.templating import render
from grader.judge.verdict import CheckResult
from grader.report.inert import markdown_text, one_line, printable

PAGES = {"html": "feedback.html", "md": "feedback.md"}
FORMATS = ("both", "html", "md")
TEXT_LIMIT = gradescope.TEST_OUTPUT_LIMIT  # characters of one message, details, hint or problem
UNWRITTEN = "its feedback pages could not be written"  # a note in the gradebook's problem column


class FeedbackError(Exception):
    """A results folder the pages cannot be drawn from; the message says which and why."""


@dataclass(frozen=True)
class CheckFeedback:
    """One check at one world size, as its student sees it."""

    check: str
    world_size: int
    description: str
    verdict: str  # passed, failed, not attempted, timed out, error, skipped
    points: float
    max_points: float
    hidden: bool  # a hidden check, shown because --hidden-visibility allows it
    message: str
    hint: str  # "" or the hint's number and text
    details: str


@dataclass(frozen=True)
class ExerciseFeedback:
    exercise: str
    title: str
    points: float
    max_points: float
    checks: tuple[CheckFeedback, ...]


@dataclass(frozen=True)
class Feedback:
    """What one submission's page says."""

    name: str
    points: float
    max_points: float
    problem: str
    files: tuple[str, ...]
    exercises: tuple[ExerciseFeedback, ...]
    unshown: int  # results of hidden checks counted in the scores, not shown


def _hint(exercise: Exercise | None, result: CheckResult) -> str:
    number = result.hint_number
    if number is None:
        return ""
    text = exercise.hints[number - 1].text if exercise and 1 <= number <= len(exercise.hints) else ""
    asked = f"hint {number} (`grader hint {result.exercise} {number}`)"
    return printable(f"{asked}: {text.strip()}" if text else asked, TEXT_LIMIT)


def _check(exercise: Exercise | None, result: CheckResult) -> CheckFeedback:
    specs = {spec.name: spec for spec in exercise.checks} if exercise else {}
    spec = specs.get(result.check)
    verdict = outcome(result)
    return CheckFeedback(
        check=result.check,
        world_size=result.world_size,
        description=spec.description if spec else "",
        verdict=verdict,
        points=round(result.points, 4),
        max_points=round(result.max_points, 4),
        hidden=result.visibility != "public",
        message=printable(result.message, TEXT_LIMIT),
        hint="" if verdict == "passed" else _hint(exercise, result),
        details="" if verdict == "passed" else printable(result.details, TEXT_LIMIT).rstrip(),
    )


def feedback(catalog: Catalog, grade: SubmissionGrade, hidden_as: str = "hidden") -> Feedback:
    """The page's content: exercises in the catalog's order (one it no longer has, after them)."""
    if hidden_as not in gradescope.HIDDEN_VISIBILITIES:
        raise ValueError(
            f"hidden checks' visibility must be one of {gradescope.HIDDEN_VISIBILITIES}, not {hidden_as!r}"
        )
    known = {exercise.id: exercise for exercise in catalog.exercises}
    graded = list(dict.fromkeys(r.exercise for r in grade.results))
    order = [e for e in known if e in graded] + [e for e in graded if e not in known]
    shown = [r for r in grade.results if hidden_as != "hidden" or r.visibility == "public"]
    exercises = tuple(
        ExerciseFeedback(
            exercise=exercise_id,
            title=known[exercise_id].title if exercise_id in known else "",
            points=round(grade.exercise_score(exercise_id), 4),
            max_points=round(sum(r.max_points for r in grade.results if r.exercise == exercise_id), 4),
            checks=tuple(_check(known.get(exercise_id), r) for r in shown if r.exercise == exercise_id),
        )
        for exercise_id in order
    )
    return Feedback(
        name=printable(grade.name, TEXT_LIMIT),
        points=round(grade.score, 4),
        max_points=round(grade.max_score, 4),
        problem=printable(grade.problem, TEXT_LIMIT),
        files=tuple(printable(choice, TEXT_LIMIT) for choice in grade.files),
        exercises=exercises,
        unshown=len(grade.results) - len(shown),
    )


def html_page(page: Feedback) -> str:
    return render("feedback.html.j2", f=page)


def fenced(text: str) -> str:
    """`text` as a Markdown code block that nothing inside can close: its fence is longer than any backtick run."""
    text = printable(text).rstrip("\n")
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}text\n{text}\n{fence}"


def prose(text: str) -> str:
    """One line of the course's own text (a title, a description) shown as typed, never as Markdown or HTML."""
    return markdown_text(text)


def code(text: str) -> str:
    """One line (an exercise's id, a check's name) as inline code: delimited by a longer backtick run than any
    inside it."""
    text = one_line(text)
    ticks = "`" * (1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{ticks} {text} {ticks}" if text.startswith("`") or text.endswith("`") else f"{ticks}{text}{ticks}"


def _points(points: float, max_points: float) -> str:
    return f"{points:g} / {max_points:g}"


def markdown_page(page: Feedback) -> str:
    score = f"**Score: {_points(page.points, page.max_points)}**"
    lines = ["# Feedback", "", "Submission:", "", fenced(page.name), "", score]
    if page.unshown:
        lines += ["", "The scores include checks whose results are not shown here."]
    if page.problem:
        lines += ["", "Problem:", "", fenced(page.problem)]
    lines += ["", "## Exercises", ""]
    lines += [
        f"- {code(e.exercise)}{' ' + prose(e.title) if e.title else ''}: {_points(e.points, e.max_points)}"
        for e in page.exercises
    ]
    if page.files:
        lines += ["", "Files graded:", "", fenced("\n".join(page.files))]
    for exercise in page.exercises:
        lines += ["", f"## {code(exercise.exercise)}{' ' + prose(exercise.title) if exercise.title else ''}"]
        for check in exercise.checks:
            hidden = " (hidden check)" if check.hidden else ""
            lines += [
                "",
                f"### {code(check.check)} at W={check.world_size}{hidden}: {check.verdict}, "
                f"{_points(check.points, check.max_points)}",
            ]
            if check.description:
                lines += ["", prose(check.description)]
            for label, text in (("Message", check.message), ("Hint", check.hint), ("Details", check.details)):
                if text:
                    lines += ["", f"{label}:", "", fenced(text)]
    return "\n".join(lines) + "\n"


def write_pages(folder: Path, catalog: Catalog, grade: SubmissionGrade, hidden_as: str, formats: str) -> list[Path]:
    """The submission's pages in `formats` ("both", "html", "md"), drawn from `grade` as the log keeps it."""
    page = feedback(catalog, grade_log.as_logged(grade), hidden_as)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, draw in (("html", html_page), ("md", markdown_page)):
        if formats in (kind, "both"):
            path = folder / PAGES[kind]
            path.write_text(draw(page), encoding="utf-8")
            written.append(path)
    return written


class FeedbackPages:
    """`grader grade`'s sink of `OUT/<submission>/feedback.html` and `.md`, in the submission's results folder.
    Pages that cannot be written become a note on the grade, for the gradebook's problem column."""

    def __init__(self, out: Path, catalog: Catalog, hidden_as: str) -> None:
        self._out = out
        self._catalog = catalog
        self._hidden_as = hidden_as

    def on_start(self, name: str) -> None:
        pass

    def on_result(self, grade: SubmissionGrade) -> None:
        folder = self._out / gradescope.results_folder(grade.name)
        try:
            write_pages(folder, self._catalog, grade, self._hidden_as, "both")
        except Exception as exc:
            grade.notes.append(f"{UNWRITTEN}: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        pass


def _folders(out: Path) -> dict[str, str]:
    """Each logged name's results folder. The log keeps a name with its control characters escaped, the
    folder is named after the name itself: batch.json, which keeps the names as given, tells them apart."""
    try:
        names = manifest.read_manifest(out / manifest.FILENAME).submissions
    except manifest.ManifestError:
        names = ()
    return {printable(name, grade_log.TEXT_LIMIT): gradescope.results_folder(name) for name in names}


def rewrite(out: Path, catalog: Catalog, hidden_as: str, formats: str) -> list[Path]:
    """Every page of the submissions in `OUT/grades.jsonl`, written again into their results folders."""
    log = out / grade_log.FILENAME
    if not out.is_dir():
        raise FeedbackError(f"{out} is not a folder: give a `grader grade --out` folder")
    if not log.is_file():
        raise FeedbackError(f"{out} has no {grade_log.FILENAME}: give a `grader grade --out` folder")
    try:
        grades = grade_log.read_grades(log)
    except grade_log.GradeLogError as exc:
        raise FeedbackError(str(exc)) from exc
    folders = _folders(out)
    written = []
    for grade in grades:
        folder = out / folders.get(grade.name, gradescope.results_folder(grade.name))
        try:
            written += write_pages(folder, catalog, grade, hidden_as, formats)
        except OSError as exc:
            raise FeedbackError(f"{folder}: the pages cannot be written: {exc.strerror or exc}") from exc
    return written


def links(report: Path, outs: Sequence[Path], names: Sequence[str]) -> list[tuple[str, str]]:
    """Each named submission's page (its HTML one, else its Markdown one) found under one of `outs`, as a
    link relative to the `report` page: (name, href)."""
    folders = {out: _folders(out) for out in outs}
    found = []
    for name in names:
        pages = [
            out / folders[out].get(name, gradescope.results_folder(name)) / PAGES[kind]
            for out in outs
            for kind in ("html", "md")
        ]
        page = next((p for p in pages if p.is_file()), None)
        if page is not None:
            relative = Path(os.path.relpath(page.resolve(), report.resolve().parent)).as_posix()
            found.append((name, quote(relative)))
    return found
