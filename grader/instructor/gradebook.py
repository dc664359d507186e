"""The batch's gradebook: one CSV row per submission, one column per exercise, and the total.

Rows are appended and flushed as submissions finish, so a batch stopped half-way (Ctrl-C, a crash
of the machine) still leaves the rows of everything graded; `close` rewrites it sorted by name.
"""

from __future__ import annotations

import csv
from pathlib import Path

from grader.catalog import Catalog
from grader.instructor.batch import SubmissionGrade


class Gradebook:
    def __init__(self, path: Path, catalog: Catalog) -> None:
        self.path = path
        self._ids = [e.id for e in catalog.exercises]
        self._header = ["submission", *self._ids, "total", "max_score", "seconds", "problem"]
        self._rows: list[list[str]] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "w", newline="")
        self._writer = csv.writer(self._file)
        self._writer.writerow(self._header)
        self._file.flush()

    def add(self, grade: SubmissionGrade) -> None:
        row = [grade.name, *(f"{grade.exercise_score(i):g}" for i in self._ids),
               f"{grade.score:g}", f"{grade.max_score:g}", f"{grade.seconds:.1f}", grade.problem]
        self._rows.append(row)
        self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        self._file.close()
        with open(self.path, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(self._header)
            writer.writerows(sorted(self._rows, key=lambda row: row[0]))

    def __enter__(self) -> Gradebook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
