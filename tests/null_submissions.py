"""Null submissions: a stub whose graded functions do nothing, in each way an honest or idle student writes it.

Each variant rewrites the body of every function the catalog grades (docstring kept): `pass`, `return
None`, a return of the wrong type, and an exit before any work. None of them does an exercise's work, so
every check of every exercise must give them 0 points: a check that passes one asserts what it never saw.
"""

from __future__ import annotations

import ast
from pathlib import Path

BODIES = {
    "pass": "pass",
    "return_none": "return None",
    "wrong_type": "return 'not what the docstring asks for'",
    "early_exit": "import sys\nsys.exit(0)",
}


def null_source(stub: str, functions: tuple[str, ...], body: str) -> str:
    """`stub` with each function named in `functions` (at the top level or in a class) given `body`."""
    tree = ast.parse(stub)
    statements = ast.parse(body).body
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in functions:
            docstring = node.body[:1] if ast.get_docstring(node) is not None else []
            node.body = [*docstring, *statements]
    return ast.unparse(tree) + "\n"


def write_null(stub_path: Path, functions: tuple[str, ...], variant: str, folder: Path) -> Path:
    """The variant of the stub at `stub_path`, written into `folder` under the stub's file name."""
    target = folder / stub_path.name
    target.write_text(null_source(stub_path.read_text(), functions, BODIES[variant]))
    return target
