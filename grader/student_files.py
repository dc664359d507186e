"""Static checks of a student's file, done before any rank starts.

A syntax error, a missing function or a wrong signature is found here by parsing (never by
importing: student code does not run in the grader's process) and reported in one clear
sentence instead of as eight identical rank tracebacks.
"""

from __future__ import annotations

import ast
from pathlib import Path

from grader.catalog import Exercise


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


def problems(path: Path, exercise: Exercise) -> str | None:
    """A message saying why the file cannot be graded, or None if it can."""
    if not path.is_file():
        return f"{path} not found (`grader reset {exercise.id}` restores the stub)"
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
        compile(tree, str(path), "exec", dont_inherit=True)  # what parsing misses: a late `from __future__`...
    except SyntaxError as exc:
        where = f"{path.name}, line {exc.lineno}"
        code = (exc.text or "").rstrip("\n")
        caret = " " * max(0, (exc.offset or 1) - 1) + "^" if code else ""
        return f"syntax error in {where}: {exc.msg}\n    {code}\n    {caret}".rstrip()
    except ValueError as exc:  # e.g. null bytes
        return f"{path.name} cannot be parsed: {exc}"
    defined = {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
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
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False
    defined = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names = exercise.function_names
    return all(name in defined and _is_stub_body(defined[name]) for name in names)
