"""docs/SECURITY.md promises only what a test proves: every test its table names exists, so a
promise cannot outlive the test behind it (a renamed or deleted test fails here)."""

from __future__ import annotations

import re
from pathlib import Path

from security.hostile import ATTACKS

REPO = Path(__file__).resolve().parents[2]
SECURITY = REPO / "docs" / "SECURITY.md"


def _rows() -> list[tuple[str, str]]:
    text = SECURITY.read_text()
    table = text.split("## Each promise and the test that proves it", 1)[1].split("\nNot proven by a test here:", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    return [(cells[0].strip("| "), cells[1].strip("| ")) for cells in rows[1:]]


def _named(proof: str) -> list[tuple[Path, str | None]]:
    """Each (test file, test function or None for the whole file) a cell names; a bare `::name` is in
    the last file named before it."""
    named, current = [], None
    for token in re.findall(r"`([^`]+)`", proof):
        if not re.fullmatch(r"(H|[\w/]+\.py)?(::\w+\*?)?", token) or token.startswith("::") and current is None:
            continue  # an attack, a command, a mode: not a test
        path, _, function = token.partition("::")
        if path == "H":
            path = "tests/security/test_hostile_batch.py"
        if path:
            current = REPO / path if "/" in path else REPO / "tests" / "security" / path
        assert current is not None, f"{token!r} names no file"
        named.append((current, function.removesuffix("*").removesuffix("_") or None))
    return named


def test_the_table_lists_promises_each_with_a_proof() -> None:
    rows = _rows()
    assert len(rows) >= 15
    assert all(promise and re.search(r"`[^`]*(test_|H::|attack\[)", proof) for promise, proof in rows), rows


def test_every_test_the_table_names_exists() -> None:
    attacks = {attack.name for attack in ATTACKS}
    for promise, proof in _rows():
        for name in re.findall(r"attack\[(\w+)\]", proof):
            assert name in attacks, f"{promise}: no attack {name!r} in hostile.py"
        for path, function in _named(proof):
            if path.suffix != ".py":
                assert path.is_dir(), f"{promise}: {path} does not exist"
                continue
            assert path.is_file(), f"{promise}: {path} does not exist"
            if function:
                assert re.search(rf"^def {re.escape(function)}", path.read_text(), re.M), (
                    f"{promise}: no test {function} in {path.name}"
                )
