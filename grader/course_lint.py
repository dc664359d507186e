"""`grader lint-course`: the course's authoring mistakes, found before a student meets them.

The catalog, the checks packages, the stubs and the solutions name one another (a check by its
name, a hint by its name, a worker by its function name, a graded function by its signature), and
nothing at grading time verifies those names until a student's check trips over one. This reads
every file statically (nothing of the course is imported or run) and reports each name that does
not resolve as `file:line: what`, so a course author fixes a whole course in one pass.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from grader import course_lint_hints, course_lint_names, student_files
from grader.catalog import Catalog, CatalogError, Exercise, load_catalog
from grader.checks import manifest
from grader.judge import replay
from grader.paths import CATALOG

CHECK_MODULES = ("checks", "hidden")  # where `@check` registers a catalog check (hidden.py: hidden checks only)
FUNCTIONS_LINE = r"functions\s*="
WORKER_METHODS = frozenset({"run", "facts", "reference", "inspect", "job"})  # CheckContext's: a worker name first
NEVER_ON_RANKS = ("grader.judge", "grader.instructor")  # packages no rank-side file may import (not in a sandbox)


@dataclass(frozen=True)
class Problem:
    """One authoring mistake, said where the author fixes it."""

    path: Path  # relative to the course root
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"


@dataclass(frozen=True)
class _Module:
    """One parsed module of a checks package; `path` as the author sees it (relative to the course)."""

    path: Path
    tree: ast.Module


def lint(root: Path) -> tuple[list[str], str]:
    """Every problem of the course at `root` as `file:line: what`, and a one-line summary of what was checked."""
    try:
        catalog = load_catalog(root)
    except CatalogError as exc:
        message = str(exc).replace(str(root / CATALOG), str(CATALOG), 1)
        return [message if message.startswith(str(CATALOG)) else f"{CATALOG.parent}/{message}"], ""
    lines = (root / CATALOG).read_text().splitlines()
    problems: list[Problem] = []
    counts = {"checks": 0, "hints": 0, "workers": 0, "causes": 0}
    known_causes = course_lint_hints.vocabulary(root)
    for exercise in catalog.exercises:
        at = _CatalogLines(lines, exercise.id)
        problems += _exercise(catalog, exercise, at, counts)
        problems += [Problem(*said) for said in course_lint_hints.ladder(exercise, at.of)]
        said, named = course_lint_hints.causes(catalog, exercise, at.of, known_causes)
        problems += [Problem(*each) for each in said]
        counts["causes"] += named
    problems += [Problem(*said) for said in course_lint_names.problems(catalog, counts)]
    summary = (
        f"course OK: {len(catalog.exercises)} exercises, {counts['checks']} checks, {counts['hints']} hint "
        f"references and {counts['workers']} worker references resolve; stubs and solutions match the catalog; "
        f"manifests list every file; every hint ladder ends in at most one code sketch, and the {counts['causes']} "
        "causes the exercises name point at the hints that declare them"
    )
    return [str(problem) for problem in problems], summary


class _CatalogLines:
    """Line numbers of an exercise's entries in catalog.toml (tomllib keeps none)."""

    def __init__(self, lines: list[str], exercise_id: str) -> None:
        start = next((n for n, line in enumerate(lines) if re.match(rf'id\s*=\s*"{re.escape(exercise_id)}"', line)), 0)
        end = next((n for n in range(start + 1, len(lines)) if lines[n].strip() == "[[exercise]]"), len(lines))
        self._lines = lines
        self._span = range(start, end)

    def of(self, pattern: str) -> int:
        """The 1-based line of the exercise's first line matching `pattern`; its id's line if none does."""
        found = next((n for n in self._span if re.match(pattern, self._lines[n].strip())), self._span.start)
        return found + 1

    def check(self, name: str) -> int:
        return self.of(rf'name\s*=\s*"{re.escape(name)}"')


def _relative(catalog: Catalog, path: Path) -> Path:
    return path.relative_to(catalog.root) if path.is_relative_to(catalog.root) else path


def _parse(catalog: Catalog, exercise: Exercise, module: str, lines: _CatalogLines) -> _Module | Problem:
    """A module of the exercise's checks package, parsed, or why it cannot be (missing, a syntax error)."""
    path = catalog.checks_path(exercise, module)
    shown = _relative(catalog, path)
    try:
        return _Module(shown, ast.parse(path.read_bytes(), filename=str(path)))
    except FileNotFoundError:
        return Problem(
            CATALOG,
            lines.of(r"checks\s*="),
            f"{exercise.id}'s checks package {exercise.checks_package} has no {module}.py ({shown})",
        )
    except SyntaxError as exc:
        return Problem(shown, exc.lineno, f"syntax error: {exc.msg}")
    except (OSError, ValueError, RecursionError, MemoryError) as exc:
        return Problem(shown, None, f"cannot be parsed: {type(exc).__name__}: {exc}")


def _exercise(catalog: Catalog, exercise: Exercise, lines: _CatalogLines, counts: dict[str, int]) -> list[Problem]:
    optional = [name for name in ("hidden", "facts") if catalog.checks_path(exercise, name).is_file()]
    names = ["checks", "workers", *optional]
    parsed = {name: _parse(catalog, exercise, name, lines) for name in names}
    problems = [p for p in parsed.values() if isinstance(p, Problem)]
    modules = [m for name, m in parsed.items() if name in CHECK_MODULES and isinstance(m, _Module)]
    complete = all(isinstance(parsed[name], _Module) for name in names if name in CHECK_MODULES)
    problems += _registrations(exercise, modules, lines, counts, complete)
    workers = parsed["workers"]
    if isinstance(workers, _Module):
        schemas = [m for m in [parsed.get("facts")] if isinstance(m, _Module)]
        problems += _worker_uses(exercise, modules + schemas, workers, counts)
    problems += _files(catalog, exercise, lines) + _hypotheses(catalog, exercise)
    return problems + _manifest(catalog, exercise, parsed_already={f"{name}.py" for name in names})


def _hypotheses(catalog: Catalog, exercise: Exercise) -> list[Problem]:
    """The exercise's hypotheses.toml, where it has one: causes the judge replays (grader/judge/replay.py)."""
    path = catalog.checks_path(exercise, "checks").with_name("hypotheses.toml")
    if not path.is_file():
        return []
    shown = _relative(catalog, path)
    try:
        document = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return [Problem(shown, None, f"not valid TOML: {exc}")]
    return [Problem(shown, None, said) for said in replay.problems(document, {hint.name for hint in exercise.hints})]


def _registered(module: _Module) -> Iterator[tuple[str, int]]:
    """(name, line) of every `@check("name")` in the module."""
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and _name(decorator.func) == "check"
                    and decorator.args
                    and isinstance(decorator.args[0], ast.Constant)
                    and isinstance(decorator.args[0].value, str)
                ):
                    yield decorator.args[0].value, decorator.lineno


def _name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _registrations(
    exercise: Exercise, modules: list[_Module], lines: _CatalogLines, counts: dict[str, int], complete: bool
) -> list[Problem]:
    """Every catalog check has a function and every `@check` a catalog entry, each in the module its visibility
    needs (`grader release` ships checks.py, never hidden.py); `complete`: every module was read (else a check
    seems missing that is only unread)."""
    problems = []
    where: dict[str, tuple[_Module, int]] = {}
    for module in modules:
        for name, line in _registered(module):
            where.setdefault(name, (module, line))
    specs = {spec.name: spec for spec in exercise.checks}
    known = ", ".join(specs)
    for name, (module, line) in where.items():
        spec = specs.get(name)
        if spec is None:
            problems.append(
                Problem(
                    module.path,
                    line,
                    f"check {name!r} is not a check of {exercise.id} in the catalog (its checks: {known})",
                )
            )
        elif spec.visibility == "hidden" and module.path.name == "checks.py":
            problems.append(
                Problem(
                    module.path,
                    line,
                    f"hidden check {name!r} is in checks.py, which students receive: move it to hidden.py beside it",
                )
            )
        elif spec.visibility == "public" and module.path.name == "hidden.py":
            problems.append(
                Problem(
                    module.path,
                    line,
                    f"public check {name!r} is in hidden.py, which the student "
                    "copy leaves out: move it to checks.py beside it",
                )
            )
    counts["checks"] += len(exercise.checks)
    if complete:
        defined = ", ".join(where) or "none"
        problems += [
            Problem(
                CATALOG,
                lines.check(spec.name),
                f"check {spec.name!r} of {exercise.id} is registered "
                f"by no @check in {exercise.checks_package}.checks or .hidden (registered: {defined})",
            )
            for spec in exercise.checks
            if spec.name not in where
        ]
    return problems


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def _worker_uses(exercise: Exercise, modules: list[_Module], workers: _Module, counts: dict[str, int]) -> list[Problem]:
    """Each `ctx.run("name", ...)` (facts, reference, inspect, job), and each `Worker("name", Schema)` of facts.py,
    names a function of the package's workers.py."""
    defined = _top_level_names(workers.tree)
    problems = []
    for module in modules:
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Call)
                and (
                    isinstance(node.func, ast.Attribute)
                    and node.func.attr in WORKER_METHODS
                    and _name(node.func.value) == "ctx"
                    or _name(node.func) == "Worker"
                )
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                counts["workers"] += 1
                worker = node.args[0].value
                if worker not in defined:
                    problems.append(
                        Problem(
                            module.path,
                            node.lineno,
                            f"worker {worker!r} is not a function of "
                            f"{workers.path} ({exercise.workers_module}:{worker})",
                        )
                    )
    return problems


def _files(catalog: Catalog, exercise: Exercise, lines: _CatalogLines) -> list[Problem]:
    """The stub and the solution define every function the catalog lists, with its parameters."""
    problems = []
    listed = f"({CATALOG}:{lines.of(FUNCTIONS_LINE)} lists {', '.join(exercise.functions)})"
    for path in (catalog.stub_path(exercise), catalog.solution_path(exercise)):
        problem = student_files.problems(path, exercise)
        if problem is not None:
            problems.append(Problem(_relative(catalog, path), _def_line(path, problem), f"{problem} {listed}"))
    return problems


def _def_line(path: Path, problem: str) -> int | None:
    """The line of the function a problem is about (a wrong signature), or None (a function missing, no file)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        match = re.search(r"line (\d+)", problem)
        return int(match.group(1)) if match else None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and problem.startswith(f"{node.name} in "):
            return node.lineno
    return None


def _manifest(catalog: Catalog, exercise: Exercise, parsed_already: set[str]) -> list[Problem]:
    """The package's manifest.toml names each of its files once, names only files it holds, and its rank
    files import nothing that stays out of a sandbox (grader/checks/manifest.py). A module in `parsed_already`
    that is missing was reported where the catalog names the package, so not again here."""
    folder = catalog.checks_path(exercise, "checks").parent
    path = folder / manifest.MANIFEST
    shown = _relative(catalog, path)
    try:
        text = path.read_text(encoding="utf-8")
        read = manifest.parse(text, shown)
    except FileNotFoundError:
        return [Problem(shown, None, manifest.MISSING)]
    except (OSError, UnicodeDecodeError) as exc:
        return [Problem(shown, None, f"cannot be read: {exc}")]
    except manifest.ManifestError as exc:
        return [Problem(shown, None, exc.reason)]
    lines = text.splitlines()

    def line(name: str, occurrence: int = 0) -> int | None:
        found = [n for n, text in enumerate(lines, 1) if not text.lstrip().startswith("#") and f'"{name}"' in text]
        return found[min(occurrence, len(found) - 1)] if found else None

    problems = [
        Problem(shown, line(name, 1), manifest.twice(name, first, second))
        for name, first, second in manifest.duplicates(read)
    ]
    problems += [
        Problem(shown, line(name), manifest.missing_reason(name, side, _relative(catalog, folder)))
        for name, side in read.sides()
        if not (folder / name).is_file() and name not in parsed_already
    ]
    listed = {name for name, _ in read.sides()}
    problems += [
        Problem(
            shown,
            None,
            f"{name} is in no list: name it in rank, judge or secret (unlisted, it neither enters a sandbox "
            "nor ships in a release)",
        )
        for name in manifest.package_files(folder)
        if name not in listed
    ]
    off_ranks = {Path(name).stem for name in (*read.judge, *read.secret) if name.endswith(".py")}
    for name in ("__init__.py", *read.rank):
        if name.endswith(".py") and (folder / name).is_file():
            problems += _rank_imports(catalog, folder / name, exercise.checks_package, off_ranks)
    return problems


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules an import statement in a module of `package` may load (a name imported from a
    package may be a module of it); a relative import is resolved against `package`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    parts = package.split(".")
    above = parts[: len(parts) - node.level + 1] if node.level else []
    base = ".".join([*above, *([node.module] if node.module else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _rank_imports(catalog: Catalog, path: Path, package: str, off_ranks: set[str]) -> list[Problem]:
    """Each import of a rank-side file that a sandbox does not hold: the judge's or the instructor's code, or a
    judge or secret module of its own package (`off_ranks`, their module names)."""
    shown = _relative(catalog, path)
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # its imports are unknown; workers.py's parse error is reported with the checks modules'
    outside = (*NEVER_ON_RANKS, *(f"{package}.{stem}" for stem in sorted(off_ranks)))
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        module = next(
            (m for m in _imported(node, package) if any(m == o or m.startswith(f"{o}.") for o in outside)), None
        )
        if module is not None:
            problems.append(
                Problem(
                    shown,
                    node.lineno,
                    f"rank-side {path.name} imports {module}, which never enters a sandbox, so it would fail to load "
                    f"there: move what it needs to a rank file, or list {path.name} as judge in {manifest.MANIFEST}",
                )
            )
    return problems
