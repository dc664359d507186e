"""`grader lint-course`'s part on hints (exercises/catalog.toml): each exercise's hints form a ladder, and a
message that names a proven cause points at the hint that teaches its fix.

The ladder. A student asks for hint 1 first, when stuck, and for the next only if still stuck: the first
rungs say the idea and what to look at, the next ones the API and its contract, and only the last may
sketch the code. Code is what a hint writes between backticks (a span, or a fenced block). A hint is
*mostly code* when more than MOSTLY_CODE of its characters are code, and a *code sketch* when it is mostly
code or holds more than SKETCH_CHARS characters of code (statements, however much prose is around them).
The lint reports a mostly-code hint before the last rung, and an exercise with more than one code sketch.

The causes. A hint declares the causes whose fix it teaches (`causes = [...]`). Every cause an exercise
names (a `Cause("...")` in its checks package, an entry of its hypotheses.toml) is declared by a hint of it
(by two where it is fixed in two places), and wherever a cause and a hint are written together (a
hypothesis, a call with `hint=` and `cause=`, a table from causes to hints) the hint is one that declares
the cause. A pair made at run time (a cause a replay proves, a hint held in a variable) is beyond an AST:
tests/test_mistakes.py holds each failure it provokes to the same rule (`Exercise.hints_declaring`). A
generic slip the judge itself names (grader/judge/slips.py: "factor_2_missing") is declared nowhere: its
message points at the hint of the function it was found in.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

from grader.catalog import Catalog, Exercise
from grader.course_lint_names import JUDGE, Said, parse_module, typed
from grader.judge.names import VOCABULARY
from grader.paths import CATALOG

CODE = re.compile(r"```.*?```|`[^`]*`", re.S)  # a fenced block, or an inline span
MOSTLY_CODE = 0.4  # share of a hint's characters in code above which it reads as code, not as an explanation
SKETCH_CHARS = 120  # code characters above which a hint writes statements out: about two lines of a solution

LineOf = Callable[[str], int]  # the catalog line of the exercise's first line matching a pattern


def code_chars(text: str) -> int:
    """How many of the text's characters are code: inside backticks, the backticks left out."""
    return sum(len(found[0].strip("`")) for found in CODE.finditer(text))


def mostly_code(text: str) -> bool:
    return code_chars(text) > MOSTLY_CODE * len(text)


def code_sketch(text: str) -> bool:
    return mostly_code(text) or code_chars(text) > SKETCH_CHARS


def _hint_line(line_of: LineOf, name: str) -> int:
    return line_of(rf'\{{\s*name\s*=\s*"{re.escape(name)}"')


def ladder(exercise: Exercise, line_of: LineOf) -> list[Said]:
    """A mostly-code hint before the last rung, and more than one code sketch."""
    found: list[Said] = []
    last = len(exercise.hints)
    for number, hint in enumerate(exercise.hints, 1):
        if number < last and mostly_code(hint.text):
            share = code_chars(hint.text) / len(hint.text)
            found.append(
                (
                    CATALOG,
                    _hint_line(line_of, hint.name),
                    f"hint {number} of {exercise.id} ({hint.name}) is {share:.0%} code, before the last rung: say "
                    "the idea, and the API's contract, in words there; only the last hint may sketch the code",
                )
            )
    sketches = [(number, hint) for number, hint in enumerate(exercise.hints, 1) if code_sketch(hint.text)]
    if len(sketches) > 1:
        numbers = ", ".join(
            f"{number} ({hint.name}: {code_chars(hint.text)} characters of code)" for number, hint in sketches
        )
        found.append(
            (
                CATALOG,
                _hint_line(line_of, sketches[1][1].name),
                f"{exercise.id} has {len(sketches)} code sketches, hints {numbers}: keep one, the last "
                f"(a sketch: more than {MOSTLY_CODE:.0%} of a hint, or more than {SKETCH_CHARS} characters, in code)",
            )
        )
    return found


def vocabulary(root: Path) -> set[str] | None:
    """The course's causes; None where the file cannot be read (course_lint_names says why)."""
    try:
        return set(tomllib.loads((root / JUDGE / VOCABULARY.name).read_text()))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None


def _literals(node: ast.AST, kind: str) -> list[str]:
    """The names of every `kind("...")` literal in an expression (HintName or Cause)."""
    return [
        call.args[0].value
        for call in ast.walk(node)
        if typed(call, kind)
        and isinstance(call, ast.Call)
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
    ]


def _paired(hint: ast.expr, cause: ast.expr) -> list[tuple[str, str]]:
    """(cause, hint) for each cause a call may name with each hint it may point at: branch by branch where
    both are conditionals on one test, else every cause with every hint."""
    if isinstance(hint, ast.IfExp) and isinstance(cause, ast.IfExp) and ast.dump(hint.test) == ast.dump(cause.test):
        return _paired(hint.body, cause.body) + _paired(hint.orelse, cause.orelse)
    return [(c, h) for c in _literals(cause, "Cause") for h in _literals(hint, "HintName")]


def _assigned(tree: ast.Module) -> dict[int, dict[str, list[ast.expr]]]:
    """Per function (by the id of its node), what each name is assigned (`=` or `:=`): where a check's `proven=`
    names the proof it built a line before (`proven = structural(Cause("x"), ...)`)."""
    scopes: dict[int, dict[str, list[ast.expr]]] = {}
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names: dict[str, list[ast.expr]] = {}
            for node in ast.walk(function):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            names.setdefault(target.id, []).append(node.value)
                elif isinstance(node, ast.NamedExpr):
                    names.setdefault(node.target.id, []).append(node.value)
            for node in ast.walk(function):
                scopes.setdefault(id(node), names)  # the innermost function's names win: it is walked first
    return scopes


def _proven_causes(proven: ast.expr, names: dict[str, list[ast.expr]]) -> list[ast.expr]:
    """The cause a `proven=` argument names: the first argument of the `structural(...)` call it is, or that its
    name was assigned once in the function (a name assigned several proofs is left to tests/test_mistakes.py,
    which checks every pair chosen at run time)."""
    if isinstance(proven, ast.Name):
        assigned = names.get(proven.id, [])
        proven = assigned[0] if len(assigned) == 1 else proven
    if isinstance(proven, ast.Call) and ast.unparse(proven.func).endswith("structural") and proven.args:
        return [proven.args[0]]
    return []


def _written_pairs(tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """(line, cause, hint) wherever a module writes a cause and a hint together: a call's `hint=` with its
    `cause=`, its `proven=` (the Cause of the proof it names, built in the same function) or a Cause among its
    arguments, `dict.fromkeys(causes, hint)`, a dict entry from cause to hint; the line is the hint's, where a
    wrong one is fixed."""
    scopes = _assigned(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            hint = keywords.get("hint")
            if hint is not None:
                causes = [keywords["cause"]] if "cause" in keywords else []
                if "proven" in keywords:
                    causes += _proven_causes(keywords["proven"], scopes.get(id(node), {}))
                causes += [arg for arg in node.args if typed(arg, "Cause")]
                yield from ((hint.lineno, c, h) for expr in causes for c, h in _paired(hint, expr))
            if ast.unparse(node.func) == "dict.fromkeys" and len(node.args) == 2:
                yield from ((node.args[1].lineno, c, h) for c, h in _paired(node.args[1], node.args[0]))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if key is not None:
                    yield from ((value.lineno, c, h) for c, h in _paired(value, key))


def causes(catalog: Catalog, exercise: Exercise, line_of: LineOf, known: set[str] | None) -> tuple[list[Said], int]:
    """The exercise's declared causes against the vocabulary, its checks and its hypotheses; and how many
    causes it names."""
    found: list[Said] = [
        (
            CATALOG,
            _hint_line(line_of, hint.name),
            f"hint {hint.name!r} of {exercise.id} declares cause {cause!r}, which is not in the course's "
            f"vocabulary ({JUDGE}/{VOCABULARY.name})",
        )
        for hint in exercise.hints
        for cause in hint.causes
        if known is not None and cause not in known
    ]
    package = catalog.checks_path(exercise, "checks").parent
    named: dict[str, tuple[Path, int | None]] = {}
    pairs: list[tuple[Path, int | None, str, str]] = []
    for path in sorted(package.glob("*.py")):
        tree = parse_module(path)
        if tree is None:
            continue
        shown = path.relative_to(catalog.root)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and typed(node, "Cause"):
                named.update({cause: (shown, node.lineno) for cause in _literals(node, "Cause") if cause not in named})
        pairs += [(shown, line, cause, hint) for line, cause, hint in _written_pairs(tree)]
    for shown, line, cause, hint in _hypotheses(catalog, package / "hypotheses.toml"):
        named.setdefault(cause, (shown, line))
        if hint:
            pairs.append((shown, line, cause, hint))
    hints = {hint.name for hint in exercise.hints}  # a hint it lacks: course_lint_names says so
    for shown, line, cause, hint in pairs:
        declaring = exercise.hints_declaring(cause)
        if declaring and hint not in declaring and hint in hints:
            found.append(
                (
                    shown,
                    line,
                    f"cause {cause!r} points at hint {hint!r}, which does not declare it; the hint of "
                    f"{exercise.id} that declares it: {' or '.join(declaring)}",
                )
            )
    found += [
        (
            shown,
            line,
            f"cause {cause!r} of {exercise.id} is declared by none of its hints: add it to the causes of the hint "
            f"that teaches its fix ({CATALOG})",
        )
        for cause, (shown, line) in named.items()
        if not exercise.hints_declaring(cause) and (known is None or cause in known)
    ]
    return found, len(named)


def _hypotheses(catalog: Catalog, path: Path) -> list[tuple[Path, int | None, str, str]]:
    """(file, line, cause, hint or "") of each entry of a hypotheses.toml (its form: grader.judge.replay)."""
    try:
        text = path.read_text()
        entries = tomllib.loads(text).get("hypothesis")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return []
    lines = text.splitlines()
    found = []
    for entry in entries if isinstance(entries, list) else []:
        cause, hint = (entry.get("cause"), entry.get("hint")) if isinstance(entry, dict) else (None, None)
        if isinstance(cause, str):
            line = next(
                (n for n, row in enumerate(lines, 1) if re.match(rf'cause\s*=\s*"{re.escape(cause)}"', row)), None
            )
            found.append((path.relative_to(catalog.root), line, cause, hint if isinstance(hint, str) else ""))
    return found
