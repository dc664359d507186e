"""Progress of a batch: a live status line on a terminal, one plain line per submission when piped."""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from grader.instructor.batch import SubmissionGrade


class BatchProgress:
    def __init__(self, total: int, stream: TextIO = sys.stdout, live: bool | None = None) -> None:
        self.total = total
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self._running: list[str] = []
        self._done = 0
        self._lock = threading.Lock()  # callbacks come from the grading threads

    def _status(self) -> None:
        if self.live:
            running = ", ".join(self._running)
            self.stream.write(f"\r\033[K[{self._done}/{self.total}] grading {running}")
            self.stream.flush()

    def started(self, name: str) -> None:
        with self._lock:
            self._running.append(name)
            self._status()

    def finished(self, grade: SubmissionGrade) -> None:
        with self._lock:
            self._done += 1
            if grade.name in self._running:
                self._running.remove(grade.name)
            if self.live:
                self.stream.write("\r\033[K")
            note = f"  {grade.problem.splitlines()[0]}" if grade.problem else ""
            self.stream.write(f"[{self._done}/{self.total}] {grade.name}: {grade.score:g}/{grade.max_score:g} "
                              f"in {grade.seconds:.1f}s{note}\n")
            if self._running:
                self._status()
            self.stream.flush()
