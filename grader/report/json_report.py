"""Machine-readable results: one entry per check and world size (for editors and scripts).

Each entry carries its hint, number and text, so that a tool can show the help without running
`grader hint`. Written to "-", the JSON is all that goes to stdout: the human report goes to stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader.catalog import Catalog, CatalogError
from grader.judge.verdict import CheckResult

FIELDS = ("exercise", "check", "world_size", "status", "message", "seconds", "cause")  # cause: "" unless proven
STDOUT = "-"


def _hint_text(catalog: Catalog | None, result: CheckResult) -> str | None:
    """The text of the hint the result points at (None without one, or for an exercise the catalog lacks)."""
    if catalog is None or not result.hint_number:
        return None
    try:
        hints = catalog.get(result.exercise).hints
    except CatalogError:
        return None
    return hints[result.hint_number - 1].text if result.hint_number <= len(hints) else None


def entry(result: CheckResult, catalog: Catalog | None = None) -> dict[str, Any]:
    """One check at one world size, with its hint: the number `grader hint` takes, and the hint's text."""
    return {
        **{name: getattr(result, name) for name in FIELDS},
        "hint": result.hint_number,
        "hint_text": _hint_text(catalog, result),
    }


def write_results(path: Path, results: Sequence[CheckResult], catalog: Catalog | None = None) -> None:
    text = json.dumps([entry(result, catalog) for result in results], indent=2) + "\n"
    if str(path) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        path.write_text(text)
