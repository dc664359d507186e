"""Submissions of known kinds, as students hand them in: the solutions, the untouched stubs, the solutions
with one named mistake of the course's tests/mistakes/ patched in, and a copy disguised as another's work.

Here, not in the tests, so that benchmarks/bench_grade.py grades the same kinds of submission the tests
prove are graded right without importing the tests.
"""

from __future__ import annotations

import ast
import io
import shutil
import tokenize
import tomllib
from collections.abc import Sequence
from pathlib import Path


def solutions(root: Path, folder: Path) -> Path:
    """The course at `root`'s reference solutions, as a submission in `folder`."""
    shutil.copytree(root / "solutions", folder)
    return folder


def stubs(root: Path, folder: Path) -> Path:
    """The exercises as handed out: every function still raises NotImplementedError."""
    shutil.copytree(root / "exercises", folder, ignore=shutil.ignore_patterns("*.toml", "__pycache__"))
    return folder


def with_mistake(root: Path, folder: Path, exercise_file: str, mistake: str) -> Path:
    """The solutions with one named mistake of `root`/tests/mistakes/ patched in."""
    solutions(root, folder)
    spec = tomllib.loads((root / "tests" / "mistakes" / f"{Path(exercise_file).stem}.toml").read_text())
    (entry,) = [m for m in spec["mistake"] if m["name"] == mistake]
    path = folder / exercise_file
    source = path.read_text()
    for old, new in entry["replace"]:
        assert old in source, f"mistake {mistake!r} no longer applies"
        source = source.replace(old, new, 1)
    path.write_text(source)
    return folder


def renamed(source: str, keep: Sequence[str]) -> str:
    """Every name the module binds (variables, parameters, top-level helper functions) renamed, but the functions
    in `keep` and their parameters (the grader calls them by name); methods (an autograd.Function's `forward`),
    attributes, keyword arguments, imported names and names in an f-string keep theirs, so the code still runs."""
    tree = ast.parse(source)
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    bound |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}  # not methods
    formatted = {
        n.id for f in ast.walk(tree) if isinstance(f, ast.JoinedStr) for n in ast.walk(f) if isinstance(n, ast.Name)
    }
    asked = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name in keep]
    parameters = {a.arg for f in asked for a in ast.walk(f.args) if isinstance(a, ast.arg)}  # the grader's calls
    bound -= set(keep) | parameters | formatted  # an f-string is one token here: the names inside it keep theirs
    keywords = {(k.lineno, k.col_offset) for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg}
    tokens, previous = [], ""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string in bound and previous != "." and token.start not in keywords:
            token = token._replace(string=f"my_{token.string.strip('_')}_")
        tokens.append(token)
        previous = token.string
    return tokenize.untokenize(tokens)


def reordered(source: str) -> str:
    """The module's top-level functions and classes in reverse order, each where another stood (with the
    comments and blank lines above it); every other statement keeps its place."""
    lines = source.splitlines(keepends=True)
    body = ast.parse(source).body
    chunks, start = [], 0
    for statement in body:
        end = statement.end_lineno or statement.lineno
        chunks.append(("".join(lines[start:end]), isinstance(statement, ast.FunctionDef | ast.ClassDef)))
        start = end
    definitions = iter(reversed([text for text, movable in chunks if movable]))
    moved = [next(definitions) if movable else text for text, movable in chunks]
    return "".join(moved) + "".join(lines[start:])


def disguised(source: str, keep: Sequence[str]) -> str:
    """A copy of `source` made to look like another's: its names renamed (but `keep`: the functions the catalog
    asks for), its functions reordered."""
    return reordered(renamed(source, keep))
