"""What the docs say of the project's own scripts holds: benchmarks/bench_grade.py is shown, wherever it is, with
the options it has and their defaults, read from the script itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH_GRADE = REPO / "benchmarks" / "bench_grade.py"
USAGE = re.compile(r"bench_grade\.py((?: \[[^\]]+\])*)")


def _options(script: Path) -> dict[str, str | None]:
    """Each option the script's parser takes (its first spelling) -> its default as written, if any."""
    options: dict[str, str | None] = {}
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            options[names[0]] = str(default.value) if isinstance(default, ast.Constant) else None
    return options


@pytest.mark.parametrize("document", ["README.md", "docs/INSTRUCTORS.md", "benchmarks/bench_grade.py"])
def test_bench_grade_is_shown_with_its_options_and_their_defaults(document: str) -> None:
    usages = USAGE.findall((REPO / document).read_text())
    assert usages, f"{document} does not show bench_grade.py's command line"
    wanted = _options(BENCH_GRADE)
    for usage in usages:
        pairs = [f"{part} ".split(" ", 1) for part in re.findall(r"\[([^\]]+)\]", usage)]  # "--count 20"
        shown = {option: value.strip() for option, value in pairs}
        assert set(shown) == set(wanted), f"{document}: bench_grade.py{usage}"
        for option, value in shown.items():
            if value.isdigit():
                assert value == wanted[option], (
                    f"{document}: {option} {value}, the script's default is {wanted[option]}"
                )
