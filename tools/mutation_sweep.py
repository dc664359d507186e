"""Mutation sweep: grade mechanical mutants of solutions/ to test that the diagnoses generalize (issue 21, point 6).

The mistakes in tests/mistakes/ were written alongside the diagnoses; mutants were not. Each mutant is one small
`ast` edit (swap two call arguments, off-by-one, drop/duplicate a call, reorder two statements, change a constant
or an operator, drop a `with`, negate an `if`) inside an exercise's graded functions, the other functions of its
file and its classes' methods (autograd Functions, hooks), graded with every check
(public and hidden). The sweep counts what the grader must never do: crash ("internal grader error") or name a
cause that does not hold (a named cause is graded again with another seed and must come back the same).

Run from the repository root (not part of the default tests; several hundred mutants take a long while):
    PYTHONPATH=. python tools/mutation_sweep.py --exercises ex03,ex08,ex10 --limit 5 --out /tmp/sweep --summary
Exit status 1 when a judge crash, an unproven cause or a failing baseline (the unmutated solution) is seen.
"""

from __future__ import annotations

import argparse
import ast
import copy
import difflib
import hashlib
import json
import queue
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere: the grader is imported from this checkout
    sys.path.insert(0, str(REPO))

from grader.catalog import Exercise, load_catalog  # noqa: E402
from grader.engine import Engine, open_engine  # noqa: E402
from grader.judge.runner import ALL_CHECKS, ENGINE_FAILURE, GradeOptions, grade_exercise  # noqa: E402
from grader.judge.verdict import CheckResult  # noqa: E402

CRASH = "internal grader error"  # how runner.py opens the message of a check that raised (the grader's bug)
RECORDS = "mutants.jsonl"

# ---------------------------------------------------------------------------------------------------------------
# Generating mutants
# ---------------------------------------------------------------------------------------------------------------

OPERATORS = (
    "swap_args",
    "range_bound",
    "subscript_index",
    "off_by_one",
    "drop_call",
    "duplicate_call",
    "swap_statements",
    "constant",
    "binary_operator",
    "compare_operator",
    "drop_with",
    "negate_if",
)
_BINARY_SWAPS: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
}
_COMPARE_SWAPS: dict[type, type] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}
_STATEMENT_LISTS = ("body", "orelse", "finalbody")

Edit = Callable[[], None]  # applies one mutation, in place, to the tree it was found in


@dataclass(frozen=True)
class Mutant:
    """One mutated exercise file, with what was changed and where (for the record and the report)."""

    exercise: str
    operator: str
    location: str  # "function:line" in the original file
    source: str
    diff: str

    @property
    def id(self) -> str:
        """Stable across runs (a hash of the source), so that a resumed sweep skips what it has graded."""
        return f"{self.exercise}:{hashlib.sha1(self.source.encode()).hexdigest()[:12]}"


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _is_number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _is_call_statement(statement: ast.stmt) -> bool:
    value = statement.value if isinstance(statement, ast.Expr) else None
    return isinstance(value, ast.Await) and isinstance(value.value, ast.Call) or isinstance(value, ast.Call)


def _shift(node: ast.expr, delta: int) -> ast.expr:
    """`node` moved by one: a constant becomes its neighbour, anything else `node + 1` / `node - 1`."""
    if _is_int(node):
        return ast.Constant(node.value + delta)  # type: ignore[attr-defined]
    return ast.BinOp(copy.deepcopy(node), ast.Add() if delta > 0 else ast.Sub(), ast.Constant(1))


def _set_attr(node: ast.AST, name: str, value: object) -> Edit:
    return lambda: setattr(node, name, value)


def _set_item(items: list, index: int, value: object) -> Edit:
    def edit() -> None:
        items[index] = value

    return edit


def _swap(items: list, i: int, j: int) -> Edit:
    def edit() -> None:
        items[i], items[j] = items[j], items[i]

    return edit


def _splice(items: list, index: int, replacement: list) -> Edit:
    def edit() -> None:
        items[index : index + 1] = replacement

    return edit


def _expression_sites(node: ast.AST) -> Iterator[tuple[str, int, Edit]]:
    """The mutations of one expression-level node: (operator, line, edit)."""
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Call):
        positional = node.args
        for i in range(len(positional) - 1):
            if not isinstance(positional[i], ast.Starred) and not isinstance(positional[i + 1], ast.Starred):
                yield "swap_args", line, _swap(positional, i, i + 1)
        if isinstance(node.func, ast.Name) and node.func.id == "range":
            for i, argument in enumerate(positional[:2]):
                for delta in (1, -1):
                    yield "range_bound", line, _set_item(positional, i, _shift(argument, delta))
    elif isinstance(node, ast.Subscript):
        index = node.slice
        if _is_int(index):
            for delta in (1, -1):
                yield "subscript_index", line, _set_attr(node, "slice", _shift(index, delta))
        elif isinstance(index, ast.Slice):
            for bound in ("lower", "upper"):
                value = getattr(index, bound)
                if value is not None:
                    for delta in (1, -1):
                        yield "subscript_index", line, _set_attr(index, bound, _shift(value, delta))
    elif isinstance(node, ast.Constant) and _is_number(node):
        value = node.value
        if type(value) is int:
            for delta in (1, -1):
                yield "off_by_one", line, _set_attr(node, "value", value + delta)
        halved = value / 2 if type(value) is float else value // 2
        for changed in dict.fromkeys((value * 2, halved, type(value)(0), type(value)(1))):
            if changed != value:
                yield "constant", line, _set_attr(node, "value", changed)
    elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BINARY_SWAPS:
        yield "binary_operator", line, _set_attr(node, "op", _BINARY_SWAPS[type(node.op)]())
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _COMPARE_SWAPS:
                yield "compare_operator", line, _set_item(node.ops, i, _COMPARE_SWAPS[type(op)]())
    elif isinstance(node, ast.If):
        yield "negate_if", line, _set_attr(node, "test", ast.UnaryOp(ast.Not(), node.test))


def _statement_sites(node: ast.AST) -> Iterator[tuple[str, int, Edit]]:
    """The mutations of the statement lists a node holds (its body, else, finally)."""
    for name in _STATEMENT_LISTS:
        statements = getattr(node, name, None)
        if not isinstance(statements, list) or not statements or not isinstance(statements[0], ast.stmt):
            continue
        for i, statement in enumerate(statements):
            line = statement.lineno
            if _is_call_statement(statement):
                yield "drop_call", line, _set_item(statements, i, ast.Pass())
                yield "duplicate_call", line, _splice(statements, i, [statement, copy.deepcopy(statement)])
            if isinstance(statement, (ast.With, ast.AsyncWith)):
                yield "drop_with", line, _splice(statements, i, list(statement.body))
            if i + 1 < len(statements) and not _is_docstring(statement):
                yield "swap_statements", line, _swap(statements, i, i + 1)


def _mutated(
    tree: ast.Module, functions: tuple[str, ...]
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The functions whose bodies are mutated, named: the graded functions first, then the rest of the student's
    code they run: the file's other functions and the methods of its classes (an autograd Function's forward and
    backward, a module's hooks). Hooks defined inside a function are part of its body."""
    defined = (ast.FunctionDef, ast.AsyncFunctionDef)
    tops = [top for top in tree.body if isinstance(top, defined)]
    yield from ((top.name, top) for top in tops if top.name in functions)
    yield from ((top.name, top) for top in tops if top.name not in functions)
    for cls in (top for top in tree.body if isinstance(top, ast.ClassDef)):
        yield from ((f"{cls.name}.{method.name}", method) for method in cls.body if isinstance(method, defined))


def _sites(tree: ast.Module, functions: tuple[str, ...]) -> list[tuple[str, str, Edit]]:
    """Every mutation of the student's code, in a fixed order: (operator, "function:line", edit)."""
    sites = []
    for name, top in _mutated(tree, functions):
        # the function's body is mutated, its signature and decorators are not (they are checked statically)
        inner = [node for statement in top.body for node in ast.walk(statement)]
        for node in [top, *inner]:
            found = _expression_sites(node) if node is not top else iter(())
            for operator, line, edit in (*found, *_statement_sites(node)):
                sites.append((operator, f"{name}:{line}", edit))
    return sites


def _compiles(source: str) -> bool:
    try:
        compile(source, "<mutant>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def generate(exercise: str, source: str, functions: tuple[str, ...]) -> list[Mutant]:
    """Every distinct mutant of `source`'s graded functions that compiles and differs from the original.

    Each mutation is applied to a fresh parse (found again by its place in the fixed order of `_sites`), so the
    edits never leak into one another; mutants are deduplicated by their unparsed source, first one kept.
    """
    original = ast.unparse(ast.parse(source))
    count = len(_sites(ast.parse(source), functions))
    seen = {original}
    mutants = []
    for index in range(count):
        tree = ast.parse(source)
        operator, location, edit = _sites(tree, functions)[index]
        edit()
        try:
            mutated = ast.unparse(ast.fix_missing_locations(tree))
        except (AttributeError, TypeError, ValueError):
            continue
        if mutated in seen or not _compiles(mutated):
            continue
        seen.add(mutated)
        diff = "".join(
            difflib.unified_diff(
                (original + "\n").splitlines(keepends=True),
                (mutated + "\n").splitlines(keepends=True),
                "original",
                "mutant",
                n=1,
            )
        )
        mutants.append(Mutant(exercise, operator, location, mutated + "\n", diff))
    return mutants


def sample(mutants: list[Mutant], limit: int | None, seed: int) -> list[Mutant]:
    """Up to `limit` mutants, seeded, taken round-robin over the operators so a small sample covers them all."""
    if limit is None or limit >= len(mutants):
        return list(mutants)
    rng = random.Random(seed)
    by_operator: dict[str, list[Mutant]] = {}
    for mutant in mutants:
        by_operator.setdefault(mutant.operator, []).append(mutant)
    for group in by_operator.values():
        rng.shuffle(group)
    chosen: list[Mutant] = []
    while len(chosen) < limit:
        for operator in OPERATORS:
            if by_operator.get(operator) and len(chosen) < limit:
                chosen.append(by_operator[operator].pop())
    return chosen


# ---------------------------------------------------------------------------------------------------------------
# Grading mutants
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What grading one mutant found, as one JSONL record."""

    id: str
    exercise: str
    operator: str
    location: str
    diff: str
    seed: int
    seconds: float = 0.0
    checks: list[dict] = field(default_factory=list)  # check, world_size, status, message, cause, recheck

    @property
    def caught(self) -> bool:
        return any(c["status"] in ("failed", "error") for c in self.checks)

    @property
    def crashes(self) -> int:
        return sum(CRASH in c["message"] for c in self.checks)

    @property
    def engine_failures(self) -> int:
        return sum(c["engine_failed"] for c in self.checks)

    @property
    def causes(self) -> int:
        return sum(bool(c["cause"]) for c in self.checks)

    @property
    def unproven(self) -> int:
        """Named causes that did not come back the same when the mutant was graded again with another seed."""
        return sum(bool(c["cause"]) and c.get("recheck_cause") != c["cause"] for c in self.checks)

    def to_json(self) -> dict:
        return {**self.__dict__, "caught": self.caught}


def _check_record(result: CheckResult) -> dict:
    return {
        "check": result.check,
        "world_size": result.world_size,
        "status": result.status,
        "message": result.message,
        "cause": result.cause,
        "engine_failed": result.engine_failed or result.message.startswith(ENGINE_FAILURE),
        "seconds": round(result.seconds, 3),
    }


class EnginePool:
    """One warm engine per parallel grading, reused for every mutant; one whose engine broke is replaced."""

    def __init__(self, jobs: int, preload: list[str]) -> None:
        self._preload = preload
        self._idle: queue.Queue[Engine] = queue.Queue()
        for _ in range(jobs):
            self._idle.put(open_engine(preload))

    def grade(self, exercise: Exercise, path: Path, options: GradeOptions) -> list[CheckResult]:
        engine = self._idle.get()
        try:
            results = grade_exercise(engine, exercise, path, options)
        except BaseException:
            engine.close()
            self._idle.put(open_engine(self._preload))
            raise
        if any(r.engine_failed for r in results):
            engine.close()
            engine = open_engine(self._preload)
        self._idle.put(engine)
        return results

    def close(self) -> None:
        while not self._idle.empty():
            self._idle.get().close()


def _mutant_seed(seed: int, mutant_id: str) -> int:
    return int(hashlib.sha1(f"{seed}:{mutant_id}".encode()).hexdigest()[:8], 16) % 2**31


def grade_mutant(
    pool: EnginePool, exercise: Exercise, mutant: Mutant, seed: int, deadline: float, folder: Path
) -> Outcome:
    """Every check of the mutant; each check that named a cause graded again with another seed, to see it hold."""
    target = folder / mutant.id.replace(":", "_") / exercise.file
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(mutant.source)
    options = GradeOptions(visibilities=ALL_CHECKS, deadline=deadline, seed=_mutant_seed(seed, mutant.id))
    outcome = Outcome(mutant.id, mutant.exercise, mutant.operator, mutant.location, mutant.diff, options.seed or 0)
    started = time.perf_counter()
    try:
        outcome.checks = [_check_record(r) for r in pool.grade(exercise, target, options)]
    except Exception as exc:  # grade_exercise itself raised: the judge's bug, counted as a crash, the sweep goes on
        crash = f"{CRASH} outside the checks: {type(exc).__name__}: {exc}"
        outcome.checks = [{"check": "(grade_exercise)", "world_size": 0, "status": "error", "message": crash}]
        outcome.checks[0].update(cause="", engine_failed=False, seconds=0.0)
        outcome.seconds = round(time.perf_counter() - started, 3)
        return outcome
    named = {c["check"] for c in outcome.checks if c["cause"]}
    if named:
        again = replace(options, only=frozenset(named), seed=_mutant_seed(seed + 1, mutant.id))
        recheck = {(r.check, r.world_size): r.cause for r in pool.grade(exercise, target, again)}
        for record in outcome.checks:
            if record["cause"]:
                record["recheck_cause"] = recheck.get((record["check"], record["world_size"]), "")
    outcome.seconds = round(time.perf_counter() - started, 3)
    return outcome


def baseline(pool: EnginePool, exercise: Exercise, source: str, seed: int, deadline: float, folder: Path) -> list[str]:
    """The checks the unmutated (unparsed) solution fails: the sweep means nothing for an exercise that has any."""
    target = folder / f"baseline_{exercise.id}" / exercise.file
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(ast.unparse(ast.parse(source)) + "\n")
    options = GradeOptions(visibilities=ALL_CHECKS, deadline=deadline, seed=seed)
    return [
        f"{r.check}[W={r.world_size}] {r.status}: {r.message.splitlines()[0] if r.message else ''}"
        for r in pool.grade(exercise, target, options)
        if r.status != "passed"
    ]


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------

COLUMNS = ("mutants", "caught", "not_caught", "crashes", "engine_failures", "named_causes", "unproven_causes")


def tally(outcomes: list[Outcome]) -> dict[str, int]:
    return {
        "mutants": len(outcomes),
        "caught": sum(o.caught for o in outcomes),
        "not_caught": sum(not o.caught for o in outcomes),
        "crashes": sum(o.crashes for o in outcomes),
        "engine_failures": sum(o.engine_failures for o in outcomes),
        "named_causes": sum(o.causes for o in outcomes),
        "unproven_causes": sum(o.unproven for o in outcomes),
    }


def summary(outcomes: list[Outcome]) -> str:
    """A table per exercise and in total, then the mutants no check caught (possibly equivalent) and the
    problems (crashes, unproven causes) one by one."""
    exercises = sorted({o.exercise for o in outcomes})
    rows = [(e, tally([o for o in outcomes if o.exercise == e])) for e in exercises] + [("total", tally(outcomes))]
    width = max([len(name) for name, _ in rows] + [8])
    lines = [f"{'exercise':<{width}}  " + "  ".join(f"{c:>{len(c)}}" for c in COLUMNS)]
    for name, counts in rows:
        lines.append(f"{name:<{width}}  " + "  ".join(f"{counts[c]:>{len(c)}}" for c in COLUMNS))
    missed = [o for o in outcomes if not o.caught]
    if missed:
        lines.append("\nnot caught (all checks passed; possibly equivalent):")
        lines += [f"  {o.id} {o.operator} at {o.location}: {_changed_line(o.diff)}" for o in missed]
    for o in outcomes:
        for c in o.checks:
            where = f"  {o.id} {o.operator} at {o.location} {c['check']}[W={c['world_size']}]"
            if CRASH in c["message"]:
                lines.append(f"CRASH {where}: {c['message'].splitlines()[0]}")
            if c["cause"] and c.get("recheck_cause") != c["cause"]:
                lines.append(f"UNPROVEN {where}: cause {c['cause']!r}, graded again: {c.get('recheck_cause')!r}")
    return "\n".join(lines)


def _changed_line(diff: str) -> str:
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return " | ".join(added) or "(a line removed)"


def _resumed(out: Path | None) -> dict[str, Outcome]:
    """The outcomes already recorded in `out` (a sweep stopped half-way goes on where it stopped)."""
    if out is None or not (out / RECORDS).exists():
        return {}
    outcomes = {}
    for line in (out / RECORDS).read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            record.pop("caught", None)
            outcomes[record["id"]] = Outcome(**record)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercises", help="comma-separated ids, numbers or prefixes (default: all)")
    parser.add_argument("--limit", type=int, help="mutants per exercise (default: all), sampled over the operators")
    parser.add_argument("--seed", type=int, default=0, help="sampling and grading seed")
    parser.add_argument("--jobs", type=int, default=1, help="gradings in parallel, one engine each")
    parser.add_argument("--deadline", type=float, default=20.0, help="seconds a run may take (a hang costs this)")
    parser.add_argument("--out", type=Path, help=f"folder for {RECORDS} (one line per mutant); resumes from it")
    parser.add_argument("--summary", action="store_true", help="print a table per exercise and in total")
    parser.add_argument("--no-baseline", action="store_true", help="skip grading the unmutated solutions first")
    args = parser.parse_args(argv)

    catalog = load_catalog(REPO)
    keys = [k.strip() for k in args.exercises.split(",")] if args.exercises else None
    exercises = catalog.select(keys).exercises
    plan = []
    for exercise in exercises:
        source = catalog.solution_path(exercise).read_text()
        every = generate(exercise.id, source, exercise.function_names)
        chosen = sample(every, args.limit, args.seed)
        print(f"{exercise.id}: {len(every)} mutants, grading {len(chosen)}", file=sys.stderr)
        plan += [(exercise, m) for m in chosen]

    done = _resumed(args.out)
    todo = [(e, m) for e, m in plan if m.id not in done]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    failing_baselines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mutation_sweep_") as tmp:
        pool = EnginePool(max(1, args.jobs), [e.workers_module for e in exercises])
        try:
            if not args.no_baseline:
                for exercise in exercises:
                    source = catalog.solution_path(exercise).read_text()
                    failed = baseline(pool, exercise, source, args.seed, args.deadline, Path(tmp))
                    failing_baselines += [f"{exercise.id} {f}" for f in failed]
            records = open(args.out / RECORDS, "a") if args.out else None
            try:
                with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as executor:
                    futures = [
                        executor.submit(grade_mutant, pool, e, m, args.seed, args.deadline, Path(tmp)) for e, m in todo
                    ]
                    for number, future in enumerate(futures, 1):
                        outcome = future.result()
                        done[outcome.id] = outcome
                        verdict = "caught" if outcome.caught else "NOT CAUGHT"
                        print(
                            f"[{number}/{len(todo)}] {outcome.id} {outcome.operator} {outcome.location}: "
                            f"{verdict} ({outcome.seconds:.1f}s)",
                            file=sys.stderr,
                        )
                        if records:
                            records.write(json.dumps(outcome.to_json()) + "\n")
                            records.flush()
            finally:
                if records:
                    records.close()
        finally:
            pool.close()

    outcomes = [done[m.id] for _, m in plan if m.id in done]
    counts = tally(outcomes)
    if args.summary:
        print(summary(outcomes))
    for line in failing_baselines:
        print(f"BASELINE FAILS {line}")
    return 1 if counts["crashes"] or counts["unproven_causes"] or failing_baselines else 0


if __name__ == "__main__":
    raise SystemExit(main())
