"""`grader lint-course`'s part on hint and cause names (grader/judge/names.py), kept apart from course_lint.py.

A check names a hint as `HintName("...")` and a cause as `Cause("...")`, wherever it writes them (a keyword,
a dict, a conditional, a positional argument), so the AST finds every one: a hint must be one of its
exercise's hints in the catalog, a cause one of the course's vocabulary (grader/judge/causes.toml), and both
literals, which the lint can read. A bare string where a name is expected (`hint="..."`) is reported, since a
dict or Any-typed value can carry it past mypy. The vocabulary has no entry that nothing names: a cause
renamed in one place and not another shows as one unknown name and one unused entry.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

from grader.catalog import Catalog, Exercise
from grader.judge.names import VOCABULARY

Said = tuple[Path, int | None, str]  # (file relative to the course, line, what): course_lint's Problem
JUDGE = Path("grader/judge")  # generic judge code: may convert names it reads (`Cause(name)`) and build templates
NAMES = {"hint": "HintName", "cause": "Cause"}  # a keyword or dict key, and the type that names it


def problems(catalog: Catalog, counts: dict[str, int]) -> list[Said]:
    """Every misnamed hint or cause of the course; counts["hints"] gets the hint references read."""
    vocabulary_path = catalog.root / JUDGE / VOCABULARY.name
    shown = vocabulary_path.relative_to(catalog.root)
    try:
        vocabulary = tomllib.loads(vocabulary_path.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return [(shown, None, f"the vocabulary of causes cannot be read: {exc}")]
    found: list[Said] = []
    used: set[str] = set()
    for exercise in catalog.exercises:
        package = catalog.checks_path(exercise, "checks").parent
        hints = [hint.name for hint in exercise.hints]
        for path in sorted(package.glob("*.py")):
            tree = parse_module(path)
            if tree is not None:
                found += _module(path.relative_to(catalog.root), tree, exercise, hints, vocabulary, used, counts)
        found += _hypotheses(catalog, package / "hypotheses.toml", vocabulary, used)
    for path in sorted((catalog.root / JUDGE).glob("*.py")):
        tree = parse_module(path)
        if tree is not None:
            found += _judge_module(path.relative_to(catalog.root), tree, vocabulary, used)
    lines = vocabulary_path.read_text().splitlines()
    found += [
        (shown, _line_of(lines, rf'"?{re.escape(cause)}"?\s*='), f"cause {cause!r} is named nowhere in the course")
        for cause in vocabulary
        if cause not in used
    ]
    return found


def parse_module(path: Path) -> ast.Module | None:
    """The module, or None where it does not parse (course_lint reports that for the checks modules)."""
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _line_of(lines: list[str], pattern: str) -> int | None:
    return next((n + 1 for n, line in enumerate(lines) if re.match(pattern, line.strip())), None)


def _unknown(cause: str) -> str:
    return f"cause {cause!r} is not in the course's vocabulary ({JUDGE}/{VOCABULARY.name})"


def typed(node: ast.AST, kind: str) -> bool:
    """Whether `node` is a call of HintName or Cause."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == kind


def _bare(node: ast.expr) -> Iterator[ast.Constant]:
    """The constants a name-valued expression may evaluate to as they are written, through conditionals and
    `or`: none may be a bare string (None for no hint, "" for no cause excepted)."""
    if isinstance(node, ast.Constant) and node.value not in (None, ""):
        yield node
    elif isinstance(node, ast.IfExp):
        yield from _bare(node.body)
        yield from _bare(node.orelse)
    elif isinstance(node, ast.BoolOp):
        for value in node.values:
            yield from _bare(value)


def _named_values(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """("hint" or "cause", value) of every `hint=`/`cause=` keyword and every "hint"/"cause" dict entry."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield from ((k.arg, k.value) for k in node.keywords if k.arg in NAMES)
        elif isinstance(node, ast.Dict):
            yield from (
                (key.value, value)
                for key, value in zip(node.keys, node.values)
                if isinstance(key, ast.Constant) and key.value in NAMES
            )


def _module(
    path: Path,
    tree: ast.Module,
    exercise: Exercise,
    hints: list[str],
    vocabulary: dict[str, object],
    used: set[str],
    counts: dict[str, int],
) -> list[Said]:
    found: list[Said] = []
    known = ", ".join(hints) or "none"
    for kind, value in _named_values(tree):
        found += [
            (path, c.lineno, f'a {kind} is named by {NAMES[kind]}("..."), not {ast.unparse(c)} ({ast.unparse(value)})')
            for c in _bare(value)
        ]
    for node in ast.walk(tree):
        for kind, known_names in (("HintName", hints), ("Cause", vocabulary)):
            if not typed(node, kind):
                continue
            assert isinstance(node, ast.Call)
            argument = node.args[0] if len(node.args) == 1 and not node.keywords else None
            if not (isinstance(argument, ast.Constant) and isinstance(argument.value, str)):
                found.append((path, node.lineno, f"{ast.unparse(node)} does not name its {kind} by a string literal"))
                continue
            name = argument.value
            if kind == "HintName":
                counts["hints"] += 1
                if name not in known_names:
                    found.append(
                        (path, node.lineno, f"hint {name!r} is not a hint of {exercise.id} (its hints: {known})")
                    )
            else:
                used.add(name)
                if name not in known_names:
                    found.append((path, node.lineno, _unknown(name)))
    return found


def _template(node: ast.JoinedStr) -> str:
    """An f-string as it is written: f"{name}_as_percentage" is "{name}_as_percentage"."""
    return "".join(
        "{" + ast.unparse(part.value) + "}" if isinstance(part, ast.FormattedValue) else str(ast.literal_eval(part))
        for part in node.values
    )


def _judge_module(path: Path, tree: ast.Module, vocabulary: dict[str, object], used: set[str]) -> list[Said]:
    """Causes the generic judge names itself: literals, or f-strings whose template is an entry ("{name}_plus_1");
    `Cause(name)` converts a name read from elsewhere, which its source answers for."""
    found: list[Said] = []
    for node in ast.walk(tree):
        if typed(node, "Cause"):
            assert isinstance(node, ast.Call)
            argument = node.args[0]
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                name = argument.value
            elif isinstance(argument, ast.JoinedStr):
                name = _template(argument)
            else:
                continue
            used.add(name)
            if name not in vocabulary:
                found.append((path, node.lineno, _unknown(name)))
    return found


def _hypotheses(catalog: Catalog, path: Path, vocabulary: dict[str, object], used: set[str]) -> list[Said]:
    """The causes of an exercise's hypotheses.toml (its other fields: course_lint and grader.judge.replay)."""
    try:
        entries = tomllib.loads(path.read_text()).get("hypothesis")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return []
    lines = path.read_text().splitlines()
    found: list[Said] = []
    for entry in entries if isinstance(entries, list) else []:
        cause = entry.get("cause") if isinstance(entry, dict) else None
        if isinstance(cause, str):
            used.add(cause)
            if cause not in vocabulary:
                line = _line_of(lines, rf'cause\s*=\s*"{re.escape(cause)}"')
                found.append((path.relative_to(catalog.root), line, _unknown(cause)))
    return found
