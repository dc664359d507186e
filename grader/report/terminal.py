"""Short, readable results for a terminal: colour when it is one, plain text when piped.

One failure is said once: the results of an exercise are gathered and identical failures (same
status, message and hint) are printed as one block naming every check and world size they cover,
with the first one's details. Passing checks get one line each, their world sizes together.

Messages, notes and details quote what the student's code printed and raised: their control
characters are shown escaped (`printable`), so a program's ESC or CR cannot repaint the verdict
lines; only the colours painted here reach the terminal as codes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from grader.judge.verdict import CheckResult
from grader.report.inert import printable

_COLOURS = {"passed": "32", "failed": "31", "error": "35", "skipped": "33", "dim": "2", "bold": "1"}
_MARKS = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "SKIP"}
_DETAIL_LINES = 20
_INDENT = " " * 9


@dataclass
class _Group:
    """Results said together: one check at every world size, or one failure wherever it happened."""

    results: list[CheckResult] = field(default_factory=list)

    @property
    def first(self) -> CheckResult:
        return self.results[0]

    def checks(self, every: Sequence[CheckResult]) -> str:
        names = list(dict.fromkeys(r.check for r in self.results))
        sizes = {name: [r.world_size for r in self.results if r.check == name] for name in names}
        if len(names) > 1 and len(self.results) == len(every):
            return f"every check [{_sizes(sorted({w for ws in sizes.values() for w in ws}))}]"
        if len({tuple(ws) for ws in sizes.values()}) == 1:
            return f"{', '.join(names)} [{_sizes(sizes[names[0]])}]"
        return ", ".join(f"{name} [{_sizes(sizes[name])}]" for name in names)


def _sizes(world_sizes: Sequence[int]) -> str:
    said = [f"W={w}" for w in dict.fromkeys(world_sizes)]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} and {said[-1]}"


def _key(result: CheckResult) -> tuple:
    if result.status == "passed":
        return ("passed", result.check, result.message)
    return (result.status, result.message, result.hint_number, tuple(result.notes))


class Terminal:
    def __init__(self, stream: TextIO | None = None, colour: bool | None = None, verbose: bool = False) -> None:
        stream = stream or sys.stdout  # looked up now, not at import: tests and pagers replace it
        self.stream = stream
        interactive = stream.isatty()
        if colour is None:
            colour = interactive and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        self.colour = colour
        self.live = interactive and colour  # a progress line, rewritten in place, while checks run
        self.verbose = verbose
        self._pending: list[CheckResult] = []

    def paint(self, text: str, style: str) -> str:
        return f"\033[{_COLOURS[style]}m{text}\033[0m" if self.colour else text

    def line(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def heading(self, text: str) -> None:
        self.line(self.paint(text, "bold"))

    def separator(self, text: str) -> None:
        """Between two runs of `grader watch`: when, and why."""
        self.line(self.paint(f"──── {time.strftime('%H:%M:%S')} {text} ".ljust(72, "─"), "dim"))

    def result(self, result: CheckResult) -> None:
        """Gather a result; `finish_exercise` prints the exercise's results, grouped."""
        self._pending.append(result)
        if self.live:
            self.stream.write(f"\r\033[K  {len(self._pending)} run, last: {result.check} [W={result.world_size}]")
            self.stream.flush()

    def finish_exercise(self) -> None:
        results, self._pending = self._pending, []
        if self.live and results:
            self.stream.write("\r\033[K")
        groups: dict[tuple, _Group] = {}
        for result in results:
            groups.setdefault(_key(result), _Group()).results.append(result)
        for group in groups.values():
            self._group(group, results)

    def _group(self, group: _Group, every: Sequence[CheckResult]) -> None:
        first = group.first
        mark = self.paint(f"{_MARKS[first.status]:>5}", first.status)
        timing = self.paint(f"({sum(r.seconds for r in group.results):.2f}s)", "dim")
        self.line(f"  {mark}  {group.checks(every)} {timing}")
        message = printable(first.message)
        if first.status == "passed" and message:
            self.line(self.paint(f"{_INDENT}{message}", "dim"))
        for note in dict.fromkeys(printable(n) for r in group.results for n in r.notes):
            self.line(self.paint(f"{_INDENT}warning: {note}", "skipped"))
        if first.status != "passed" and message:
            for text in message.splitlines():
                self.line(f"{_INDENT}{text}")
            if first.hint_number:
                self.line(self.paint(f"{_INDENT}hint: grader hint {first.exercise} {first.hint_number}", "dim"))
        details = printable((first.verbose_details or first.details) if self.verbose else first.details).rstrip()
        if details and (self.verbose or first.status in ("failed", "error")):
            lines = details.splitlines()
            shown = lines if self.verbose else lines[:_DETAIL_LINES]
            for text in shown:
                self.line(self.paint(f"{_INDENT}| {text}", "dim"))
            if len(shown) < len(lines):
                self.line(self.paint(f"{_INDENT}| ... {len(lines) - len(shown)} more lines (use -v)", "dim"))

    def summary(self, results: Sequence[CheckResult], seconds: float, hidden_included: bool) -> None:
        passed = sum(r.passed for r in results)
        skipped = sum(r.status == "skipped" for r in results)
        total = len(results) - skipped
        skip_note = f" ({skipped} skipped)" if skipped else ""
        if total == 0:
            self.line(self.paint(f"no check ran: {skipped} skipped", "skipped"))
        elif passed == total:
            what = "all checks passed" if hidden_included else "public checks passed"
            self.line(self.paint(f"{what}: {passed}/{total}{skip_note} in {seconds:.1f}s", "passed"))
        else:
            self.line(self.paint(f"{passed}/{total} checks passed{skip_note} in {seconds:.1f}s", "failed"))


class TerminalSink:
    """`grader check` and `watch` on a terminal: each exercise under its heading, its results grouped once
    it is done, then the summary. `seconds` says how long the results took (the wall clock, or their own sum)."""

    def __init__(
        self,
        terminal: Terminal,
        titles: dict[str, str],
        seconds: Callable[[Sequence[CheckResult]], float],
        hidden_included: bool,
    ) -> None:
        self.terminal = terminal
        self._titles = titles  # exercise id -> title
        self._seconds = seconds
        self._hidden_included = hidden_included
        self._results: list[CheckResult] = []
        self._open = False  # an exercise's results are still gathered

    def on_start(self, name: str) -> None:
        self._finish()
        self.terminal.heading(f"{name}: {self._titles[name]}")
        self._open = True

    def on_result(self, result: CheckResult) -> None:
        self._results.append(result)
        self.terminal.result(result)

    def _finish(self) -> None:
        if self._open:
            self.terminal.finish_exercise()
            self._open = False

    def close(self) -> None:
        self._finish()
        self.terminal.summary(self._results, self._seconds(self._results), self._hidden_included)
