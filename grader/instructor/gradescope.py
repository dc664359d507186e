"""A submission's grade as Gradescope's autograder `results.json`.

One test per check (its world sizes summed). Public checks are "visible"; hidden checks get the
visibility the instructor chose ("hidden" by default: never shown to students). The top-level
`output`, which students always see, is written from visible tests only, so no hidden check's name
or message can reach a student through it. Only the fields Gradescope documents are written; the
maximum score, which it takes from the assignment's settings, is kept in `extra_data`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.catalog import Catalog
from grader.checks.runner import CheckResult
from grader.instructor.batch import SubmissionGrade

HIDDEN_VISIBILITIES = ("hidden", "after_due_date", "after_published")


def _output(results: list[CheckResult]) -> str:
    lines = []
    for result in results:
        verdict = "passed" if result.passed else f"{result.status}: {result.message}"
        lines.append(f"W={result.world_size}: {verdict}")
    return "\n".join(lines)


def _tests(catalog: Catalog, grade: SubmissionGrade, hidden_as: str) -> list[dict[str, Any]]:
    tests = []
    for exercise in catalog.exercises:
        for index, spec in enumerate(exercise.checks, 1):
            results = [r for r in grade.results if r.exercise == exercise.id and r.check == spec.name]
            if not results:
                continue
            tests.append({
                "name": f"{exercise.id}: {spec.name}",
                "number": f"{exercise.number}.{index}",
                "score": round(sum(r.points for r in results), 4),
                "max_score": round(sum(r.max_points for r in results), 4),
                "status": "passed" if all(r.passed for r in results) else "failed",
                "output": f"{spec.description}\n{_output(results)}",
                "visibility": "visible" if results[0].visibility == "public" else hidden_as,
            })
    return tests


def results_json(catalog: Catalog, grade: SubmissionGrade, hidden_as: str = "hidden") -> dict[str, Any]:
    if hidden_as not in HIDDEN_VISIBILITIES:
        raise ValueError(f"hidden checks' visibility must be one of {HIDDEN_VISIBILITIES}, not {hidden_as!r}")
    tests = _tests(catalog, grade, hidden_as)
    visible = [t for t in tests if t["visibility"] == "visible"]
    passed = sum(t["status"] == "passed" for t in visible)
    summary = f"{passed}/{len(visible)} visible checks passed"
    if grade.problem_column:
        summary = f"{grade.problem_column}\n{summary}"
    return {
        "score": round(grade.score, 4),
        "execution_time": round(grade.seconds, 2),
        "output": summary,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {"max_score": round(grade.max_score, 4)},
        "tests": tests,
    }


def write(path: Path, catalog: Catalog, grade: SubmissionGrade, hidden_as: str = "hidden") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results_json(catalog, grade, hidden_as), indent=2) + "\n")
