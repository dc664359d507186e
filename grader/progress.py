"""The student's progress: which exercises pass, kept in `.grader/` inside the course.

A result is remembered with the hash of the file it was obtained on, so an exercise edited since
its last check shows as "changed" instead of a stale "passing".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from grader import student_files
from grader.catalog import Exercise
from grader.judge.verdict import CheckResult

STATE_DIR = ".grader"


def file_hash(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


class Progress:
    def __init__(self, root: Path) -> None:
        self.path = root / STATE_DIR / "progress.json"
        try:
            self._state: dict[str, dict] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self._state = {}

    def record(self, exercise: Exercise, path: Path, results: Sequence[CheckResult]) -> None:
        self._state[exercise.id] = {
            "hash": file_hash(path),
            "passed": bool(results) and all(r.passed for r in results),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self._state, indent=2, sort_keys=True))

    def status(self, exercise: Exercise, path: Path) -> str:
        """One of: not started, passing, failing, changed (edited since its last check)."""
        if student_files.is_untouched(path, exercise):
            return "not started"
        entry = self._state.get(exercise.id)
        if entry is None or entry["hash"] != file_hash(path):
            return "changed" if entry else "not checked"
        return "passing" if entry["passed"] else "failing"
