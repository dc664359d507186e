"""Machine-readable results: one entry per check and world size (for editors and scripts)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from grader.judge.verdict import CheckResult

FIELDS = ("exercise", "check", "world_size", "status", "message", "seconds")


def write_results(path: Path, results: Sequence[CheckResult]) -> None:
    entries = [{name: getattr(result, name) for name in FIELDS} for result in results]
    text = json.dumps(entries, indent=2) + "\n"
    if str(path) == "-":
        print(text, end="")
    else:
        path.write_text(text)
