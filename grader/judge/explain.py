"""What torch's own errors mean in this course, from the table in torch_errors.toml.

Kept as data, not code: a maintainer adds an error with one meaning here by adding an entry with a
real message as its example, and tests/test_errors.py checks every entry against it. The meaning
is said next to torch's message, never instead of it.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.judge.names import HintName

TABLE = Path(__file__).with_name("torch_errors.toml")


@dataclass(frozen=True)
class KnownError:
    name: str
    pattern: re.Pattern[str]
    meaning: str
    example: str
    where: re.Pattern[str] | None = None
    hint: HintName | None = None
    example_traceback: str = ""  # a traceback line `where` matches, for the entries that have one


def parse(text: str) -> list[KnownError]:
    """The entries of a table; raises ValueError for a missing field, a bad regex or a repeated name."""
    entries: list[KnownError] = []
    names: set[str] = set()
    for raw in tomllib.loads(text).get("error", []):
        missing = {"name", "pattern", "meaning", "example"} - set(raw)
        if missing:
            raise ValueError(f"entry {raw.get('name', '?')!r} lacks {sorted(missing)}")
        if raw["name"] in names:
            raise ValueError(f"two entries are named {raw['name']!r}")
        names.add(raw["name"])
        if raw.get("where") and not raw.get("example_traceback"):
            raise ValueError(f"entry {raw['name']!r} has `where` but no `example_traceback`")
        try:
            pattern = re.compile(raw["pattern"])
            where = re.compile(raw["where"]) if raw.get("where") else None
        except re.error as exc:
            raise ValueError(f"entry {raw['name']!r}: {exc}") from exc
        entries.append(
            KnownError(
                raw["name"],
                pattern,
                raw["meaning"],
                raw["example"],
                where,
                HintName(raw["hint"]) if raw.get("hint") else None,
                raw.get("example_traceback", ""),
            )
        )
    return entries


def error_chain(error: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """Type and message of a reported error and of every error it was raised from or while
    handling (the rank's `chain`), outermost first; the error alone where the report has no chain."""
    if not isinstance(error, Mapping):
        return []
    chain = error.get("chain")
    links: list[Mapping[str, Any]]
    if isinstance(chain, list) and chain:
        links = [e for e in chain if isinstance(e, dict)]
    else:
        links = [error]
    return [{"type": str(e.get("type", "")), "message": str(e.get("message", ""))} for e in links]


def error_messages(error: Mapping[str, Any] | None) -> str:
    """Every message in a reported error's chain, one per line: what a check searches for a known text."""
    return "\n".join(e["message"] for e in error_chain(error))


def error_types(error: dict[str, Any] | None) -> list[str]:
    """The exception types in a reported error's chain, outermost first."""
    return [e["type"] for e in error_chain(error)]


@functools.cache
def known_errors() -> tuple[KnownError, ...]:
    return tuple(parse(TABLE.read_text()))


def explain(error: dict[str, Any] | None) -> KnownError | None:
    """The entry that says what a rank's reported error means, searched through its whole chain
    (a wrapper's own message first, then what it was raised from); None when none applies."""
    if not isinstance(error, dict):
        return None
    traceback = str(error.get("traceback", ""))
    for link in error_chain(error):
        text = f"{link['type']}: {link['message']}"
        for entry in known_errors():
            if entry.pattern.search(text) and (entry.where is None or entry.where.search(traceback)):
                return entry
    return None
