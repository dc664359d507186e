"""A submission's grade as Gradescope's autograder `results.json`.

One test per check (its world sizes summed). Public checks are "visible"; hidden checks get the
visibility the instructor chose ("hidden" by default: never shown to students). The top-level
`output`, which students always see, is written from visible tests only, so no hidden check's name
or message can reach a student through it. Only the fields Gradescope documents are written; the
maximum score, which it takes from the assignment's settings, is kept in `extra_data`.

The tamper scan's marks (grader/instructor/tamper_scan.py) are for instructors only: they go where
Gradescope shows students nothing, `extra_data.review` (stored, never displayed) and, when there are
marks, one test of visibility "hidden" whatever `hidden_as` says ("never shown to students"), worth 0
of 0 points, so an instructor sees them on the submission's page. Never in `output` or a visible test.
The batch's provenance and seed (grader/instructor/provenance.py) are kept there too, `extra_data.provenance`.

What the student's code wrote (exception messages, file names) is shown, never obeyed: outputs are
plain text with control characters escaped, each cut to `TEST_OUTPUT_LIMIT` characters and those of
the visible tests together to about `OUTPUT_LIMIT` (the hidden ones' apart, so that no visible output
is cut shorter for what a hidden check said), so one submission printing megabytes cannot bloat the page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.catalog import Catalog
from grader.instructor import class_report, grade_log, gradebook, manifest, overrides, regrade, roster
from grader.instructor.submission_grade import SubmissionGrade
from grader.judge.verdict import CheckResult
from grader.report.inert import file_name, one_line, printable

HIDDEN_VISIBILITIES = ("hidden", "after_due_date", "after_published")
TEST_OUTPUT_LIMIT = 10_000  # characters of one test's output
OUTPUT_LIMIT = 100_000  # of the visible tests' together; once spent, each still gets `TEST_OUTPUT_FLOOR`
TEST_OUTPUT_FLOOR = 500
UNWRITTEN = "its results.json could not be written"  # a note in the gradebook's problem column
REVIEW_TEST = "for review (instructors only): the tamper scan marked these lines; the score is unchanged"


def _output(results: list[CheckResult]) -> str:
    lines = []
    for result in results:
        verdict = "passed" if result.passed else f"{result.status}: {result.message}"
        lines.append(f"W={result.world_size}: {verdict}")
    return "\n".join(lines)


def _tests(catalog: Catalog, grade: SubmissionGrade, hidden_as: str) -> list[dict[str, Any]]:
    tests = []
    left = {True: OUTPUT_LIMIT, False: OUTPUT_LIMIT}  # visible or not -> characters left
    for exercise in catalog.exercises:
        for index, spec in enumerate(exercise.checks, 1):
            results = [r for r in grade.results if r.exercise == exercise.id and r.check == spec.name]
            if not results:
                continue
            visible = results[0].visibility == "public"
            output = printable(
                f"{spec.description}\n{_output(results)}", max(TEST_OUTPUT_FLOOR, min(TEST_OUTPUT_LIMIT, left[visible]))
            )
            left[visible] -= len(output)
            tests.append(
                {
                    "name": f"{exercise.id}: {spec.name}",
                    "number": f"{exercise.number}.{index}",
                    "score": round(sum(r.points for r in results), 4),
                    "max_score": round(sum(r.max_points for r in results), 4),
                    "status": "passed" if all(r.passed for r in results) else "failed",
                    "output": output,
                    "visibility": "visible" if visible else hidden_as,
                }
            )
    return tests


def _review_test(grade: SubmissionGrade) -> list[dict[str, Any]]:
    """The marks as one hidden test worth nothing, where an instructor sees them and a student never does."""
    if not grade.review:
        return []
    output = printable("\n".join(map(str, grade.review)), TEST_OUTPUT_LIMIT)
    return [
        {"name": REVIEW_TEST, "score": 0, "max_score": 0, "status": "failed", "output": output, "visibility": "hidden"}
    ]


def results_json(
    catalog: Catalog, grade: SubmissionGrade, hidden_as: str = "hidden", stamp: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The results.json of `grade`; `stamp` (the batch's provenance and seed) goes where only instructors look."""
    if hidden_as not in HIDDEN_VISIBILITIES:
        raise ValueError(f"hidden checks' visibility must be one of {HIDDEN_VISIBILITIES}, not {hidden_as!r}")
    tests = _tests(catalog, grade, hidden_as)
    visible = [t for t in tests if t["visibility"] == "visible"]
    passed = sum(t["status"] == "passed" for t in visible)
    summary = f"{passed}/{len(visible)} visible checks passed"
    if grade.problem_column:
        summary = f"{printable(grade.problem_column, TEST_OUTPUT_LIMIT)}\n{summary}"
    if grade.files:  # the student's own file names: which of them was graded for each exercise, and why
        summary += "\nFiles graded:\n" + "\n".join(one_line(choice, TEST_OUTPUT_FLOOR * 2) for choice in grade.files)
    return {
        "score": round(grade.score, 4),
        "execution_time": round(grade.seconds, 2),
        "output": summary,
        "output_format": "text",  # never html or markdown: a student's <a> or [link](...) shows as typed
        "test_output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {
            "max_score": round(grade.max_score, 4),
            "files": [one_line(choice, TEST_OUTPUT_FLOOR * 2) for choice in grade.files],
            "review": [
                {"file": printable(m.file, TEST_OUTPUT_FLOOR), "line": m.line, "reason": printable(m.reason, 1000)}
                for m in grade.review
            ],
            **({"provenance": stamp} if stamp is not None else {}),
        },
        "tests": tests + _review_test(grade),
    }


# what `grader grade --out` writes beside the results folders: a submission named like one gets a slug
RESERVED = frozenset(
    name.casefold()
    for name in (
        gradebook.FILENAME,
        class_report.FILENAME,
        class_report.SIMILARITY_PAGE,
        class_report.SIMILARITY_FOLDER,
        grade_log.FILENAME,
        manifest.FILENAME,
        roster.FILENAME,
        overrides.FILENAME,
        regrade.MARKDOWN,
        regrade.CSV,
    )
)


def results_folder(name: str) -> str:
    """The folder of a submission's results.json under OUT: never one of the batch's own files."""
    return file_name(name, RESERVED)


def write(
    path: Path, catalog: Catalog, grade: SubmissionGrade, hidden_as: str = "hidden", stamp: dict[str, Any] | None = None
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results_json(catalog, grade, hidden_as, stamp), indent=2) + "\n")


class ResultsFiles:
    """`grader grade`'s sink of `OUT/<submission>/results.json`. One that cannot be written becomes a note
    on the grade, for the sinks after this one (the gradebook's row is owed all the same)."""

    def __init__(self, out: Path, catalog: Catalog, hidden_as: str, stamp: dict[str, Any] | None = None) -> None:
        self.out = out
        self._catalog = catalog
        self._hidden_as = hidden_as
        self._stamp = stamp

    def on_start(self, name: str) -> None:
        pass

    def on_result(self, grade: SubmissionGrade) -> None:
        try:
            path = self.out / results_folder(grade.name) / "results.json"
            write(path, self._catalog, grade, self._hidden_as, self._stamp)
        except Exception as exc:
            grade.notes.append(f"{UNWRITTEN}: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        pass
