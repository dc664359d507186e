"""Where a command's results go as they come (`Sink`): `grader check` prints each exercise's and writes --json
and the student's progress; `grader grade` writes each submission's results.json, gradebook row, grade log
line and progress line, then the class report. Both commands read as: plan, grade, sinks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

R = TypeVar("R")
R_in = TypeVar("R_in", contravariant=True)


class Sink(Protocol[R_in]):
    def on_start(self, name: str) -> None:
        """Grading of `name` (an exercise id, a submission's name) begins."""

    def on_result(self, result: R_in) -> None:
        """One result (a check's, a submission's grade), as soon as it is known."""

    def close(self) -> None:
        """Grading is over: write what is owed at the end (a summary, a file sorted, a report)."""


class Collected(Generic[R]):
    """A sink that hands every result over at once, when closed (a JSON file, the student's progress)."""

    def __init__(self, done: Callable[[list[R]], None]) -> None:
        self._done = done
        self.results: list[R] = []

    def on_start(self, name: str) -> None:
        pass

    def on_result(self, result: R) -> None:
        self.results.append(result)

    def close(self) -> None:
        self._done(self.results)


@contextlib.contextmanager
def closing(sinks: Sequence[Sink[R]]) -> Iterator[Sequence[Sink[R]]]:
    """Closes every sink in order when the block ends, even one that raised: what was written is kept."""
    with contextlib.ExitStack() as stack:
        for sink in reversed(sinks):  # an ExitStack unwinds last in, first out
            stack.callback(sink.close)
        yield sinks
