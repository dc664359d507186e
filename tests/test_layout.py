"""The layout holds what the README's Design section says of it: no import cycle among the grader's
modules, the student side imports nothing of the instructor's, and the rank side (what enters a
sandbox, as each exercise's manifest.toml draws it) imports nothing outside it. Read from the
code's own imports, statically."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grader.sandbox.rank_view import rank_side_files

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "grader"


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each grader module -> the grader modules it imports anywhere in its code (lazy imports too)."""
    modules = {_module(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        graph[name] = {m for m in found if m in modules and m != name and not name.startswith(m + ".")}
    return graph


GRAPH = _imports()


def _reach(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in GRAPH[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_no_two_modules_import_each_other_through_any_path() -> None:
    cycles = sorted(m for m in GRAPH if m in _reach(m) and not m.endswith("__main__"))
    assert cycles == [], cycles


STUDENT_SIDE = [
    "grader.commands",
    "grader.notebook",
    "grader.plan",
    "grader.grading_engines",
    "grader.grading",
    "grader.intake",
]


@pytest.mark.parametrize("student_side", STUDENT_SIDE)
def test_the_student_side_imports_nothing_of_the_instructor(student_side: str) -> None:
    assert not {m for m in _reach(student_side) if m.startswith("grader.instructor")}


def test_the_rank_side_imports_nothing_of_the_judge() -> None:
    """What enters a sandbox (each exercise's manifest draws it) imports only what enters with it."""
    rank_side = {_module(PACKAGE / path) for path in rank_side_files(PACKAGE) if path.suffix == ".py"}
    assert len(rank_side) > 20
    assert "grader.checks.ex08_ring_allreduce.workers" in rank_side
    assert not {m for m in rank_side if m.startswith(("grader.judge", "grader.instructor", "grader.quiz"))}
    for module in sorted(rank_side):
        outside = GRAPH[module] - rank_side
        assert not outside, f"{module} imports {outside}, which no sandbox holds"


def test_the_judge_loads_no_torch() -> None:
    """Verdicts are computed in the grader's own process from what the ranks report: it never needs torch, whose
    import alone costs over a second of every `grader check` (a rank-side module imported by the judge did)."""
    import subprocess
    import sys

    code = "import sys, grader.cli, grader.judge.runner, grader.judge.api; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stdout + done.stderr
