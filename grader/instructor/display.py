"""Progress of a batch: a live bar on a terminal, one plain line per submission when piped.

The bar says submissions done / total, time elapsed and an estimate of the time left (elapsed per
submission so far, times what remains: with -j N parallel gradings this already counts the
parallelism). On a terminal it is redrawn every second by a ticker, so the clock keeps moving while a
slow submission grades; finished submissions are printed above it. Piped output (a log file, a
cluster job's output) gets no control characters: one line per submission, with the same numbers.
Names and problems come from students, so they are printed with `one_line`: an ESC, CR or newline
of theirs shows as its escape and can neither move the cursor nor fake a line.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import TextIO

from grader.instructor.submission_grade import SubmissionGrade
from grader.report.inert import one_line

BAR_WIDTH = 24
TICK_S = 1.0


def clock(seconds: float) -> str:
    """0:07, 1:05:09: minutes and seconds, hours when needed."""
    whole = max(0, int(round(seconds)))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class BatchProgress:
    def __init__(self, total: int, stream: TextIO = sys.stdout, live: bool | None = None) -> None:
        self.total = total
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self._running: list[str] = []
        self._done = 0
        self._started = time.monotonic()
        self._lock = threading.Lock()  # callbacks come from the grading threads
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.live:
            self._ticker = threading.Thread(target=self._tick, name="batch-progress", daemon=True)
            self._ticker.start()

    def __enter__(self) -> BatchProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops the clock and clears the bar: the batch is over."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            if self.live:
                self.stream.write("\r\033[K")
                self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                self._draw()

    def timing(self) -> str:
        """'elapsed 0:42, about 1:18 left' (no estimate before the first submission is done)."""
        elapsed = time.monotonic() - self._started
        text = f"elapsed {clock(elapsed)}"
        if 0 < self._done < self.total:
            text += f", about {clock(elapsed / self._done * (self.total - self._done))} left"
        return text

    def bar(self) -> str:
        filled = BAR_WIDTH * self._done // max(1, self.total)
        percent = 100 * self._done // max(1, self.total)
        return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self._done}/{self.total} {percent:3d}%  {self.timing()}"

    def _draw(self) -> None:
        if not self.live:
            return
        line = self.bar()
        if self._running:
            line += "  grading " + ", ".join(map(one_line, self._running))
        width = shutil.get_terminal_size((100, 20)).columns
        if len(line) >= width:
            line = line[: max(0, width - 2)] + "…"
        self.stream.write(f"\r\033[K{line}")
        self.stream.flush()

    def on_start(self, name: str) -> None:
        with self._lock:
            self._running.append(name)
            self._draw()

    def on_result(self, grade: SubmissionGrade) -> None:
        with self._lock:
            self._done += 1
            if grade.name in self._running:
                self._running.remove(grade.name)
            if self.live:
                self.stream.write("\r\033[K")
            note = f"  {one_line(grade.problem.splitlines()[0])}" if grade.problem else ""
            line = (
                f"[{self._done}/{self.total}] {one_line(grade.name)}: {grade.score:g}/{grade.max_score:g} "
                f"in {grade.seconds:.1f}s{note}"
            )
            if not self.live:
                line += f"  ({self.timing()})"
            self.stream.write(line + "\n")
            self._draw()
            self.stream.flush()
