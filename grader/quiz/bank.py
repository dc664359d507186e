"""Question banks: load the TOML files in a bank directory and validate every question.

Validation collects every problem instead of stopping at the first, and each problem names the
file, the question and the field and says how to fix it, because bank authors fix a whole file in
one pass and should never have to read a Python traceback.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from grader.catalog import CatalogError, load_catalog
from grader.paths import CourseNotFound, course_root
from grader.quiz import formula
from grader.quiz.precision import Precision, PrecisionError, parse_precision

TYPES = ("single", "multiple", "numeric", "truefalse")
DIFFICULTIES = ("easy", "medium", "hard")
POOLS = ("practice", "exam")
GENERAL = "general"  # the exercise tag of a question about no one exercise
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)(?::([^{}]+))?\}")
LETTERS = "ABCDEFGHIJ"
QUESTION_FIELDS = {
    "id",
    "type",
    "text",
    "options",
    "answer",
    "tolerance",
    "tags",
    "difficulty",
    "points",
    "explanation",
    "parameters",
    "derived",
    "unit",
    "pool",
    "precision",
}


@dataclass(frozen=True)
class Option:
    text: str
    explanation: str
    correct: bool


@dataclass(frozen=True)
class Parameter:
    """A parameter drawn per version: from `values`, or from min..max in steps of `step`."""

    name: str
    values: tuple[float, ...]


@dataclass(frozen=True)
class Question:
    id: str
    type: str
    text: str
    source: Path
    objective: str
    exercise: str
    pool: str
    topics: tuple[str, ...] = ()
    difficulty: str = "medium"
    points: float = 1.0
    explanation: str = ""
    options: tuple[Option, ...] = ()
    answer_bool: bool | None = None
    answer_formula: formula.Formula | None = None
    tolerance_abs: float = 0.0
    tolerance_rel: float = 0.0
    unit: str = ""
    precision: Precision | None = None
    parameters: tuple[Parameter, ...] = ()
    derived: tuple[tuple[str, formula.Formula], ...] = ()

    @property
    def tags(self) -> tuple[str, ...]:
        return (self.exercise, *self.topics)

    @property
    def parametric(self) -> bool:
        return bool(self.parameters)


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a bank, with where it is and what to do about it."""

    file: Path
    question: str | None
    field: str | None
    message: str
    fix: str

    def __str__(self) -> str:
        where = [str(self.file)]
        if self.question:
            where.append(f"question {self.question!r}")
        if self.field:
            where.append(f"field {self.field!r}")
        return f"{': '.join(where)}: {self.message} (fix: {self.fix})"


@dataclass
class Bank:
    questions: list[Question] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


class BankNotFound(Exception):
    """The bank directory is missing or holds no bank file."""


def course_exercises(directory: Path) -> tuple[str, ...] | None:
    """The exercise ids of the course holding `directory` (found as `grader` finds its course), which
    questions are tagged with; None where no course can say, and then any exercise tag is taken."""
    try:
        return tuple(exercise.id for exercise in load_catalog(course_root(directory)).exercises)
    except (CourseNotFound, CatalogError):
        return None


def load_banks(directory: Path, exercises: Sequence[str] | None = None) -> Bank:
    """Load and validate every `*.toml` in `directory` (sorted, so the order is stable).

    `exercises`: the ids a question may be tagged with (besides "general"); by default the course's."""
    if not directory.is_dir():
        raise BankNotFound(f"bank directory {directory} does not exist; pass --bank DIR")
    files = sorted(directory.glob("*.toml"))
    if not files:
        raise BankNotFound(f"no *.toml question bank in {directory}; pass --bank DIR")
    bank = Bank(files=files)
    seen: dict[str, Path] = {}
    known = tuple(exercises) if exercises is not None else course_exercises(directory)
    for path in files:
        questions, problems = load_file(path, known)
        bank.problems.extend(problems)
        for question in questions:
            if question.id in seen:
                bank.problems.append(
                    Problem(
                        path,
                        question.id,
                        "id",
                        f"id also used in {seen[question.id]}",
                        "give every question a unique id across all banks",
                    )
                )
                continue
            seen[question.id] = path
            bank.questions.append(question)
    return bank


def load_file(path: Path, exercises: tuple[str, ...] | None = None) -> tuple[list[Question], list[Problem]]:
    """Parse one bank file; a TOML syntax error is one problem naming the line. `exercises`: the ids a
    question may be tagged with (None: any)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        return [], [
            Problem(
                path,
                None,
                None,
                f"TOML syntax error: {exc}",
                'correct the TOML at that line (quote strings, close brackets and """-strings)',
            )
        ]
    except (OSError, UnicodeDecodeError) as exc:
        return [], [Problem(path, None, None, f"cannot read the file: {exc}", "save it as UTF-8 text")]
    entries = data.get("questions")
    if not isinstance(entries, list) or not entries:
        return [], [
            Problem(path, None, "questions", "no [[questions]] entries", "add questions as [[questions]] tables")
        ]
    questions: list[Question] = []
    problems: list[Problem] = []
    for index, entry in enumerate(entries, start=1):
        checker = _Checker(path, entry, index, exercises)
        question = checker.build()
        problems.extend(checker.problems)
        if question is not None:
            questions.append(question)
    return questions, problems


class _Checker:
    """Validates one `[[questions]]` table, collecting problems, and builds the Question."""

    def __init__(self, path: Path, entry: dict[str, Any], index: int, exercises: tuple[str, ...] | None) -> None:
        self.path = path
        self.entry = entry
        self.exercises = exercises
        raw_id = entry.get("id")
        self.qid = raw_id if isinstance(raw_id, str) and raw_id else f"#{index}"
        self.problems: list[Problem] = []

    def problem(self, field_name: str, message: str, fix: str) -> None:
        self.problems.append(Problem(self.path, self.qid, field_name, message, fix))

    def require(self, name: str, kind: type | tuple[type, ...], fix: str) -> Any:
        value = self.entry.get(name)
        if value is None:
            self.problem(name, "missing", fix)
            return None
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            self.problem(name, f"has the wrong type ({type(value).__name__})", fix)
            return None
        return value

    def build(self) -> Question | None:
        entry = self.entry
        qid = self.require("id", str, 'add id = "short-kebab-id"')
        if qid is not None and not ID_PATTERN.match(qid):
            self.problem("id", f"{qid!r} is not a plain id", "use lower-case letters, digits, - and _ only")
        for unknown in sorted(set(entry) - QUESTION_FIELDS):
            self.problem(unknown, "unknown field", f"remove it or use one of {', '.join(sorted(QUESTION_FIELDS))}")
        kind = self.require("type", str, f"add type = one of {', '.join(TYPES)}")
        if kind is not None and kind not in TYPES:
            self.problem("type", f"unknown type {kind!r}", f"use one of {', '.join(TYPES)}")
            kind = None
        text = self.require("text", str, 'add text = """the question in Markdown"""')
        objective, exercise, topics = self.tags()
        difficulty = entry.get("difficulty", "medium")
        if difficulty not in DIFFICULTIES:
            self.problem("difficulty", f"unknown difficulty {difficulty!r}", f"use one of {', '.join(DIFFICULTIES)}")
        points = entry.get("points", 1)
        if isinstance(points, bool) or not isinstance(points, (int, float)) or points <= 0:
            self.problem(
                "points", f"{points!r} is not a positive number", "use points = 1 (or another positive number)"
            )
            points = 1
        explanation = entry.get("explanation", "")
        if not isinstance(explanation, str):
            self.problem("explanation", "is not a string", 'use explanation = """why the answer is right"""')
            explanation = ""
        pool = entry.get("pool")
        if pool not in POOLS:
            self.problem(
                "pool",
                "missing" if pool is None else f"unknown pool {pool!r}",
                'add pool = "practice" (students may see it) or pool = "exam" (kept for graded quizzes)',
            )
        body: dict[str, Any] | None = None
        if kind in ("single", "multiple"):
            body = self.choices(kind)
        elif kind == "truefalse":
            body = self.truefalse()
        elif kind == "numeric":
            body = self.numeric(text or "")
        if self.problems or body is None or qid is None or kind is None or text is None:
            return None
        return Question(
            id=qid,
            type=kind,
            text=text,
            source=self.path,
            objective=objective or "",
            exercise=exercise or "",
            topics=topics,
            difficulty=str(difficulty),
            points=float(points),
            explanation=explanation,
            pool=str(pool),
            **body,
        )

    def tags(self) -> tuple[str | None, str | None, tuple[str, ...]]:
        tags = self.entry.get("tags")
        fix = 'add tags = { objective = "what the learner can do", exercise = "ex03_train_ddp" }'
        if not isinstance(tags, dict):
            self.problem("tags", "missing" if tags is None else "is not a table", fix)
            return None, None, ()
        objective = tags.get("objective")
        if not isinstance(objective, str) or not objective.strip():
            self.problem("tags.objective", "missing learning objective", fix)
        exercise = tags.get("exercise")
        if self.exercises is None:
            if not isinstance(exercise, str) or not exercise.strip():
                self.problem("tags.exercise", "missing exercise", f'name the exercise, or "{GENERAL}"')
        elif exercise not in (*self.exercises, GENERAL):
            self.problem(
                "tags.exercise", f"unknown exercise {exercise!r}", f"use one of {', '.join((*self.exercises, GENERAL))}"
            )
        topics = tags.get("topics", [])
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            self.problem("tags.topics", "is not a list of strings", 'use topics = ["ddp", "bucketing"]')
            topics = []
        return objective, exercise, tuple(topics)

    def choices(self, kind: str) -> dict[str, Any] | None:
        raw = self.entry.get("options")
        if not isinstance(raw, list) or len(raw) < 2:
            self.problem(
                "options",
                "needs at least two options",
                'add [[questions.options]] tables with text = "..." and explanation = "..."',
            )
            return None
        if len(raw) > len(LETTERS):
            self.problem("options", f"has {len(raw)} options", f"use at most {len(LETTERS)}")
            return None
        letters = LETTERS[: len(raw)]
        texts: list[str] = []
        explanations: list[str] = []
        for number, option in enumerate(raw, start=1):
            text = option.get("text") if isinstance(option, dict) else None
            why = option.get("explanation") if isinstance(option, dict) else None
            if not isinstance(text, str) or not text.strip():
                self.problem(f"options[{number}].text", "missing", 'add text = "the option"')
            if not isinstance(why, str) or not why.strip():
                self.problem(
                    f"options[{number}].explanation", "missing", 'add explanation = "why this option is right or wrong"'
                )
            texts.append(str(text))
            explanations.append(str(why))
        if len(set(texts)) != len(texts):
            self.problem("options", "two options have the same text", "make every option distinct")
        answer = self.entry.get("answer")
        chosen = [answer] if kind == "single" and isinstance(answer, str) else answer
        example = '"B"' if kind == "single" else '["A", "C"]'
        if not isinstance(chosen, list) or not chosen or not all(isinstance(a, str) for a in chosen):
            self.problem(
                "answer", "missing or not letters", f"use answer = {example} (letters of options in file order)"
            )
            return None
        wrong = [a for a in chosen if a.upper() not in letters]
        if wrong:
            self.problem(
                "answer",
                f"{', '.join(map(repr, wrong))} is not among the options {', '.join(letters)}",
                f"use letters {letters[0]}..{letters[-1]} of the options in file order",
            )
            return None
        correct = {a.upper() for a in chosen}
        if kind == "multiple" and len(correct) == len(letters):
            self.problem("answer", "every option is correct", "add at least one wrong option")
        options = tuple(Option(t, e, letter in correct) for letter, t, e in zip(letters, texts, explanations))
        return {"options": options}

    def truefalse(self) -> dict[str, Any] | None:
        answer = self.entry.get("answer")
        if not isinstance(answer, bool):
            self.problem("answer", f"{answer!r} is not true or false", "use answer = true or answer = false")
            return None
        if not self.entry.get("explanation"):
            self.problem("explanation", "missing", 'add explanation = """why the statement is true or false"""')
        return {"answer_bool": answer}

    def numeric(self, text: str) -> dict[str, Any] | None:
        parameters = self.parameters()
        names = {p.name for p in parameters}
        derived: list[tuple[str, formula.Formula]] = []
        raw_derived = self.entry.get("derived", {})
        if not isinstance(raw_derived, dict):
            self.problem("derived", "is not a table", 'use [questions.derived] with lines like lr = "base * W"')
            raw_derived = {}
        for name, source in raw_derived.items():
            parsed = self.formula(f"derived.{name}", source, names)
            if parsed is not None:
                derived.append((name, parsed))
            names.add(name)
        answer = self.entry.get("answer")
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = repr(answer)
        parsed_answer = self.formula("answer", answer, names)
        precision = self.precision()
        tolerance = self.tolerance()
        for name in sorted({p.name for p in parameters} - set(placeholder_names(text))):
            self.problem(
                "text", f"parameter {name!r} never appears in the text", f"write {{{name}}} where its value belongs"
            )
        unit = self.entry.get("unit", "")
        if not isinstance(unit, str):
            self.problem("unit", "is not a string", 'use unit = "MB"')
            unit = ""
        if parsed_answer is None or tolerance is None or precision is None:
            return None
        return {
            "answer_formula": parsed_answer,
            "tolerance_abs": tolerance[0],
            "tolerance_rel": tolerance[1],
            "precision": precision,
            "unit": unit,
            "parameters": tuple(parameters),
            "derived": tuple(derived),
        }

    def precision(self) -> Precision | None:
        try:
            return parse_precision(self.entry.get("precision"))
        except PrecisionError as exc:
            self.problem(
                "precision", str(exc), 'state what is asked: precision = "exact", { sig = 3 } or { decimals = 1 }'
            )
            return None

    def formula(self, field_name: str, source: Any, names: set[str]) -> formula.Formula | None:
        if not isinstance(source, str):
            self.problem(
                field_name, "missing or not a formula", 'use a number or a formula string such as "2 * (W - 1) / W * M"'
            )
            return None
        try:
            parsed = formula.parse(source)
        except formula.FormulaError as exc:
            self.problem(
                field_name,
                str(exc),
                "use numbers, parameter names, + - * / ** ( ) and min, max, ceil, floor, log2, sqrt",
            )
            return None
        unknown = sorted(parsed.names - names)
        if unknown:
            known = ", ".join(sorted(names)) or "none defined"
            self.problem(
                field_name,
                f"formula uses {', '.join(map(repr, unknown))}, which is not a parameter",
                f"use a parameter ({known}) or define it under [questions.parameters]",
            )
            return None
        return parsed

    def parameters(self) -> list[Parameter]:
        raw = self.entry.get("parameters", {})
        if not isinstance(raw, dict):
            self.problem("parameters", "is not a table", "use [questions.parameters] with W = { values = [2, 4, 8] }")
            return []
        parameters: list[Parameter] = []
        for name, spec in raw.items():
            values = self.parameter_values(name, spec)
            if values:
                parameters.append(Parameter(name, values))
        return parameters

    def parameter_values(self, name: str, spec: Any) -> tuple[float, ...]:
        field_name = f"parameters.{name}"
        fix = "use { values = [2, 4, 8] } or { min = 2, max = 16, step = 2 }"
        if not isinstance(spec, dict):
            self.problem(field_name, "is not a table", fix)
            return ()
        if "values" in spec:
            values = spec["values"]
            if not isinstance(values, list) or not values or not all(_is_number(v) for v in values):
                self.problem(field_name, "values must be a non-empty list of numbers", fix)
                return ()
            return tuple(values)
        low, high, step = spec.get("min"), spec.get("max"), spec.get("step", 1)
        if not (_is_number(low) and _is_number(high) and _is_number(step)) or step <= 0 or high < low:
            self.problem(field_name, "needs numbers min <= max and a positive step", fix)
            return ()
        count = math.floor((high - low) / step + 1e-9) + 1
        if count > 100_000:
            self.problem(field_name, f"range holds {count} values", "use a larger step")
            return ()
        if isinstance(low, int) and isinstance(high, int) and isinstance(step, int):
            return tuple(range(low, high + 1, step))
        # Rounding removes float noise from min + i*step, so 0.1-steps print as 0.3.
        return tuple(round(low + i * step, 9) for i in range(count))

    def tolerance(self) -> tuple[float, float] | None:
        """Extra room beyond the stated precision; optional, so (0, 0) when absent."""
        raw = self.entry.get("tolerance")
        fix = "use tolerance = { rel = 0.01 } or { abs = 0.5 } (both allowed, non-negative), or leave it out"
        if raw is None:
            return 0.0, 0.0
        if not isinstance(raw, dict) or not ({"abs", "rel"} & set(raw)) or set(raw) - {"abs", "rel"}:
            self.problem("tolerance", f"is not a table of abs and rel: {raw!r}", fix)
            return None
        values = (raw.get("abs", 0.0), raw.get("rel", 0.0))
        if not all(_is_number(v) for v in values):
            self.problem("tolerance", "abs and rel must be numbers", fix)
            return None
        if any(v < 0 for v in values):
            self.problem("tolerance", f"negative tolerance {raw}", fix)
            return None
        return float(values[0]), float(values[1])


def placeholder_names(text: str) -> list[str]:
    """The names written as `{name}` or `{name:spec}` in a question's text."""
    return [match.group(1) for match in PLACEHOLDER.finditer(text)]


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
