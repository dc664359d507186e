"""Short, readable results for a terminal: colour when it is one, plain text when piped."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TextIO

from grader.checks.runner import CheckResult

_COLOURS = {"passed": "32", "failed": "31", "error": "35", "skipped": "33", "dim": "2", "bold": "1"}
_MARKS = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "SKIP"}
_DETAIL_LINES = 40


class Terminal:
    def __init__(self, stream: TextIO | None = None, colour: bool | None = None, verbose: bool = False) -> None:
        stream = stream or sys.stdout  # looked up now, not at import: tests and pagers replace it
        self.stream = stream
        if colour is None:
            colour = stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        self.colour = colour
        self.verbose = verbose

    def paint(self, text: str, style: str) -> str:
        return f"\033[{_COLOURS[style]}m{text}\033[0m" if self.colour else text

    def line(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def heading(self, text: str) -> None:
        self.line(self.paint(text, "bold"))

    def result(self, result: CheckResult) -> None:
        mark = self.paint(f"{_MARKS[result.status]:>5}", result.status)
        timing = self.paint(f"({result.seconds:.2f}s)", "dim")
        self.line(f"  {mark}  {result.check} [W={result.world_size}] {timing}")
        if result.status == "passed" and result.message:
            self.line(self.paint(f"         {result.message}", "dim"))
        for note in result.notes:
            self.line(self.paint(f"         warning: {note}", "skipped"))
        if result.status != "passed" and result.message:
            for text in result.message.splitlines():
                self.line(f"         {text}")
            if result.hint:
                self.line(self.paint(f"         hint: grader hint {result.exercise} {result.hint}", "dim"))
        details = result.details.rstrip()
        if details and (self.verbose or result.status in ("failed", "error")):
            lines = details.splitlines()
            shown = lines if self.verbose else lines[:_DETAIL_LINES]
            for text in shown:
                self.line(self.paint(f"         | {text}", "dim"))
            if len(shown) < len(lines):
                self.line(self.paint(f"         | ... {len(lines) - len(shown)} more lines (use -v)", "dim"))

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
