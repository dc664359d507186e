"""Every grade of a batch, check by check, as JSON Lines (`OUT/grades.jsonl`).

The gradebook keeps one number per exercise; the class report needs each check's status, message
and time, and `grader gradebook merge` needs them from every shard. One line per submission,
appended and flushed as it finishes, so an interrupted batch keeps what it graded (a last line cut
off mid-write is dropped when read back).

What a submission wrote is logged as text, not as commands: control characters escaped (JSON would
keep them, and `jq -r` would hand them to a terminal) and each message or details cut to
`TEXT_LIMIT` characters, so the class report and merges read back only inert text.

Each line also carries the provenance of its batch and its seed (grader/instructor/provenance.py, `stamp`), so
a line copied elsewhere still says what graded it; reading a line back ignores it (a log of an older grader has
none).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.instructor.submission_grade import SubmissionGrade
from grader.instructor.tamper_scan import ReviewMark
from grader.judge.verdict import CheckResult
from grader.report.inert import printable

FILENAME = "grades.jsonl"
TEXT_LIMIT = 20_000  # characters of one message, details or note
_RESULT_TEXTS = ("message", "details", "verbose_details")


class GradeLogError(Exception):
    """A grades.jsonl that cannot be read back; the message names the file and line."""


def _text(text: str) -> str:
    return printable(text, TEXT_LIMIT)


def _result(result: CheckResult) -> dict[str, Any]:
    record = result.to_json()
    record.update({key: _text(record[key]) for key in _RESULT_TEXTS}, notes=list(map(_text, result.notes)))
    return record


def _record(grade: SubmissionGrade) -> dict[str, Any]:
    return {
        "name": _text(grade.name),
        "seconds": round(grade.seconds, 3),
        "problem": _text(grade.problem),
        "notes": list(map(_text, grade.notes)),
        "results": list(map(_result, grade.results)),
        "review": [{"file": _text(m.file), "line": m.line, "reason": _text(m.reason)} for m in grade.review],
        "files": list(map(_text, grade.files)),
    }


def _grade(record: dict[str, Any]) -> SubmissionGrade:
    results = [CheckResult.from_record(r) for r in record["results"]]
    review = tuple(ReviewMark(str(m["file"]), int(m["line"]), str(m["reason"])) for m in record.get("review", []))
    return SubmissionGrade(
        record["name"],
        results,
        float(record["seconds"]),
        record.get("problem", ""),
        list(record.get("notes", [])),
        review,
        list(record.get("files", [])),
    )


def as_logged(grade: SubmissionGrade) -> SubmissionGrade:
    """The grade as grades.jsonl keeps it (texts escaped and cut): what is drawn from a batch as it runs is
    then the same as what is drawn again from its log."""
    return _grade(_record(grade))


class GradeLog:
    def __init__(self, path: Path, stamp: dict[str, Any] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._stamp = stamp  # the batch's provenance and seed, on every line
        self._file = open(path, "w", encoding="utf-8")

    def on_start(self, name: str) -> None:
        pass

    def on_result(self, grade: SubmissionGrade) -> None:
        record = _record(grade) | ({"provenance": self._stamp} if self._stamp is not None else {})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> GradeLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_grades(path: Path) -> list[SubmissionGrade]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise GradeLogError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    grades = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            grades.append(_grade(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            if number == len(lines):  # the batch was stopped while writing its last line
                break
            raise GradeLogError(f"{path}, line {number}: not a grade written by `grader grade` ({exc})") from exc
    return grades
