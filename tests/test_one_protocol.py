"""One diagnosis protocol: one tolerance helper (grader/judge/tolerance.py), and its rules for what is close.

Private `_close` helpers had drifted apart (one broadcast a wrong shape into a pass, one raised on None);
this keeps every numeric comparison of the grader going through tolerance.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

from grader.judge.tolerance import close, close_each, close_either_way, relative_difference

TOLERANCE = Path("grader/judge/tolerance.py")
# A name that says "numerically close": close, _close, allclose, isclose, close_each... but not `closed_to_others`.
CLOSE_NAME = re.compile(r"(^|_)(all|is)?close($|_)")


def _modules() -> list[Path]:
    return sorted(path.relative_to(REPO) for path in (REPO / "grader").rglob("*.py"))


def _tolerance_code(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, what) of each function named like a tolerance helper and each allclose/isclose call in a module.

    A method named `close` is allowed: in the grader it always releases a resource (an engine, a file, a
    sandbox), which has nothing to do with tolerances."""
    found = []
    methods = {
        id(node)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "close"
    }
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in methods:
            if CLOSE_NAME.search(node.name):
                found.append((node.lineno, f"defines {node.name}"))
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called.endswith(("allclose", "isclose")):
                found.append((node.lineno, f"calls {ast.unparse(node.func)}"))
    return found


def test_only_tolerance_py_decides_what_is_close() -> None:
    found = [
        f"{path}:{line}: {what}"
        for path in _modules()
        if path != TOLERANCE
        for line, what in _tolerance_code(ast.parse((REPO / path).read_text()))
    ]
    assert found == [], "use grader.judge.tolerance instead:\n" + "\n".join(found)


def test_the_rule_sees_a_private_helper_and_a_direct_call() -> None:
    tree = ast.parse(
        "import math\nimport numpy as np\n"
        "def _close(a, b):\n    return np.allclose(a, b)\n"
        "ok = math.isclose(1, 1)\n"
        "class Engine:\n    def close(self):\n        pass\n"
        "def closed_to_others(path):\n    pass\n"
    )
    assert sorted(_tolerance_code(tree)) == [
        (3, "defines _close"),
        (4, "calls np.allclose"),
        (5, "calls math.isclose"),
    ]


@pytest.mark.parametrize(
    ("got", "want", "expected"),
    [
        (None, 1.0, False),
        (1.0, None, False),
        (None, None, False),
        ([1.0, 2.0], [1.0, 2.0, 3.0], False),  # another shape: numpy would raise
        (np.zeros((2, 3)), np.zeros(3), False),  # another shape: numpy would broadcast it into a pass
        ([[1.0], [1.0, 2.0]], [[1.0], [1.0, 2.0]], False),  # ragged
        ("1.0", 1.0, False),
        (float("nan"), float("nan"), False),
        (1.0, 1.0 + 1e-7, True),
        ([1.0, 2.0], (1.0, 2.0 + 1e-7), True),
        (np.ones((2, 2)), np.ones((2, 2)) * 1.1, False),
    ],
)
def test_close(got: object, want: object, expected: bool) -> None:
    assert close(got, want, rtol=1e-5, atol=1e-6) is expected


def test_close_scales_with_the_reference_and_exact_means_exact() -> None:
    assert close(1.0, 100.0, rtol=0.99, atol=0) and not close(100.0, 1.0, rtol=0.99, atol=0)
    assert close(np.arange(3.0), np.arange(3.0), rtol=0, atol=0)
    assert not close(np.arange(3.0), np.arange(3.0) + 1e-12, rtol=0, atol=0)


def test_close_each_and_close_either_way() -> None:
    assert close_each([[1.0, 2.0], [3.0]], [[1.0, 2.0], [3.0]], rtol=0, atol=0)
    assert not close_each([[1.0, 2.0]], [[1.0, 2.0], [3.0]], rtol=0, atol=0)
    assert close_either_way(100.0, 1.0, rtol=0.99, atol=0) and close_either_way(1.0, 100.0, rtol=0.99, atol=0)
    assert not close_either_way(None, 1.0, rtol=1, atol=1)


def test_relative_difference_is_of_the_references_scale_and_never_small_for_a_wrong_shape() -> None:
    assert relative_difference([1.0, 2.0], [1.0, 4.0]) == 0.5
    assert relative_difference(np.zeros(3), np.zeros(3)) == 0.0
    assert relative_difference(None, [1.0]) == relative_difference([1.0], [[1.0]]) == float("inf")
    assert relative_difference(["a"], [1.0]) == float("inf")
