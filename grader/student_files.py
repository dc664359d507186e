"""Static checks of a student's file, done before any rank starts.

A syntax error, a missing function or a wrong signature is found here by parsing (never by
importing: student code does not run in the grader's process) and reported in one clear
sentence instead of as eight identical rank tracebacks. Parsing runs on the trusted side, so it is
bounded: a file over MAX_SOURCE_BYTES is not parsed at all (which also bounds the time parsing
takes), and one nested too deeply for the parser is that file's problem, never the grader's crash.
"""

from __future__ import annotations

import ast
from pathlib import Path

from grader.catalog import Exercise

MAX_SOURCE_BYTES = 1 << 20  # a solution is a few KiB; a generated or padded file must not stall the grader
SHOWN_LINE = 200  # characters of the offending line a syntax error quotes


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args)]
    if args.vararg:
        names.append("*" + args.vararg.arg)
    names += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        names.append("**" + args.kwarg.arg)
    return names


def _expected(signature: str) -> ast.FunctionDef:
    return ast.parse(f"def {signature}: pass").body[0]  # type: ignore[return-value]


def _source(path: Path) -> bytes | None:
    """The file's bytes, or None when it is over MAX_SOURCE_BYTES (read no further than that)."""
    with path.open("rb") as handle:
        source = handle.read(MAX_SOURCE_BYTES + 1)
    return source if len(source) <= MAX_SOURCE_BYTES else None


def problems(path: Path, exercise: Exercise) -> str | None:
    """A message saying why the file cannot be graded, or None if it can."""
    if not path.is_file():
        return f"{path} not found (`grader reset {exercise.id}` restores the stub)"
    try:
        source = _source(path)
    except OSError as exc:
        return f"{path.name} cannot be read: {exc.strerror or exc}"
    if source is None:
        return (
            f"{path.name} is {path.stat().st_size / (1 << 20):.1f} MiB; an exercise file is at most "
            f"{MAX_SOURCE_BYTES >> 20} MiB"
        )
    try:
        tree = ast.parse(source, filename=str(path))
        compile(tree, str(path), "exec", dont_inherit=True)  # what parsing misses: a late `from __future__`...
    except SyntaxError as exc:
        where = f"{path.name}, line {exc.lineno}"
        code = (exc.text or "").rstrip("\n")[:SHOWN_LINE]  # a generated file's one line may be a megabyte
        caret = " " * max(0, (exc.offset or 1) - 1) + "^" if code and (exc.offset or 1) <= SHOWN_LINE else ""
        return f"syntax error in {where}: {exc.msg}\n    {code}\n    {caret}".rstrip()
    except ValueError as exc:  # e.g. null bytes
        return f"{path.name} cannot be parsed: {exc}"
    except (RecursionError, MemoryError):  # the parser's and compiler's own depth limits, not the machine's memory
        return f"{path.name} is too deeply nested to parse: keep expressions and blocks a few levels deep"
    defined = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for signature in exercise.functions:
        expected = _expected(signature)
        found = defined.get(expected.name)
        if found is None:
            return f"{path.name} defines no function {signature} (keep the stub's name and parameters)"
        if _parameters(found) != _parameters(expected):
            return (
                f"{expected.name} in {path.name} takes ({', '.join(_parameters(found))}) but the grader "
                f"calls it as {signature}: keep the stub's parameters"
            )
    return None


def _is_stub_body(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    raised = body[0].exc
    if isinstance(raised, ast.Call):
        raised = raised.func
    return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"


def is_untouched(path: Path, exercise: Exercise) -> bool:
    """True while every function the student must write still only raises NotImplementedError."""
    try:
        source = _source(path)
        if source is None:  # far bigger than any stub
            return False
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    defined = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names = exercise.function_names
    return all(name in defined and _is_stub_body(defined[name]) for name in names)
