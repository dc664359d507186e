"""Draw quiz versions from a seed: question order, option order and parameter values.

Everything random comes from `random.Random` seeded with strings built from the quiz seed, so a
version is a pure function of (bank, seed, version number) and re-rendering gives the same bytes.
For single-choice questions the correct option's position is rotated through the positions from
one version to the next (from a per-question random start) instead of being left to chance, so
over many versions every letter is the right answer equally often and position carries no hint.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from grader.quiz.bank import LETTERS, PLACEHOLDER, Problem, Question
from grader.quiz.formula import FormulaError


@dataclass(frozen=True)
class Choice:
    letter: str
    text: str
    explanation: str
    correct: bool


@dataclass(frozen=True)
class Item:
    """A question as it stands in one version: numbered, filled in, options lettered."""

    number: int
    question: Question
    text: str
    explanation: str
    choices: tuple[Choice, ...] = ()
    value: float | None = None
    tolerance: float = 0.0
    params: tuple[tuple[str, float], ...] = ()

    @property
    def correct_letters(self) -> list[str]:
        return [c.letter for c in self.choices if c.correct]


@dataclass(frozen=True)
class Version:
    number: int
    seed: int
    title: str
    items: tuple[Item, ...]


def format_number(value: float, spec: str | None = None) -> str:
    """Print a value as a person would write it: 8 not 8.0, 0.00016 not 0.00016000000000000001."""
    if spec:
        return format(value, spec)
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def fill(text: str, env: Mapping[str, float]) -> str:
    """Replace `{name}` / `{name:spec}` by the value; braces around other words are left alone."""

    def replace(match: re.Match[str]) -> str:
        name, spec = match.group(1), match.group(2)
        return format_number(env[name], spec) if name in env else match.group(0)

    return PLACEHOLDER.sub(replace, text) if env else text


def select(questions: Sequence[Question], seed: int, tags: Sequence[str] = (), count: int | None = None) -> list[Question]:
    """The questions of the quiz: those matching any tag, then `count` of them drawn by the seed."""
    wanted = set(tags)
    chosen = [q for q in questions if not wanted or wanted & set(q.tags)]
    if count is not None and count < len(chosen):
        picked = set(random.Random(f"select:{seed}").sample(range(len(chosen)), count))
        chosen = [q for i, q in enumerate(chosen) if i in picked]
    return chosen


def draw(questions: Sequence[Question], seed: int, number: int, title: str = "Quiz") -> Version:
    """Version `number` (1-based) of a quiz made of `questions`."""
    rng = random.Random(f"version:{seed}:{number}")
    order = list(questions)
    rng.shuffle(order)
    items = tuple(_item(position, question, seed, number, rng) for position, question in enumerate(order, start=1))
    return Version(number, seed, title, items)


def draw_all(questions: Sequence[Question], seed: int, versions: int, title: str = "Quiz") -> list[Version]:
    return [draw(questions, seed, number, title) for number in range(1, versions + 1)]


def _item(position: int, question: Question, seed: int, number: int, rng: random.Random) -> Item:
    if question.type == "numeric":
        return _numeric_item(position, question, rng)
    if question.type == "truefalse":
        answer = bool(question.answer_bool)
        choices = (Choice("A", "True", question.explanation, answer), Choice("B", "False", question.explanation, not answer))
        return Item(position, question, question.text, question.explanation, choices)
    options = list(question.options)
    if question.type == "single":
        right = next(o for o in options if o.correct)
        others = [o for o in options if not o.correct]
        rng.shuffle(others)
        start = random.Random(f"rotate:{seed}:{question.id}").randrange(len(options))
        others.insert((start + number) % len(options), right)
        options = others
    else:
        rng.shuffle(options)
    choices = tuple(Choice(letter, o.text, o.explanation, o.correct) for letter, o in zip(LETTERS, options))
    return Item(position, question, question.text, question.explanation, choices)


def evaluate(question: Question, params: Mapping[str, float]) -> dict[str, float]:
    """Parameters plus every derived value plus `answer`, in definition order."""
    env = dict(params)
    for name, parsed in question.derived:
        env[name] = parsed.evaluate(env)
    assert question.answer_formula is not None
    env["answer"] = question.answer_formula.evaluate(env)
    if not math.isfinite(env["answer"]):
        raise FormulaError(f"answer of {question.id!r} is not finite with {dict(params)}")
    return env


def _numeric_item(position: int, question: Question, rng: random.Random) -> Item:
    params = {p.name: rng.choice(p.values) for p in question.parameters}
    env = evaluate(question, params)
    value = env["answer"]
    tolerance = max(question.tolerance_abs, question.tolerance_rel * abs(value))
    shown = {name: value for name, value in env.items() if name != "answer"}
    return Item(position, question, fill(question.text, shown), fill(question.explanation, env),
                value=value, tolerance=tolerance, params=tuple(params.items()))


def probe(question: Question, tries: int = 40) -> Problem | None:
    """Evaluate a numeric question at its extreme and at random parameter values, so that a
    division by zero or a log of a negative shows up in `lint`, not in front of a class."""
    if question.type != "numeric":
        return None
    rng = random.Random(f"probe:{question.id}")
    draws = [{p.name: min(p.values) for p in question.parameters}, {p.name: max(p.values) for p in question.parameters}]
    draws += [{p.name: rng.choice(p.values) for p in question.parameters} for _ in range(tries)]
    for params in draws:
        try:
            evaluate(question, params)
        except FormulaError as exc:
            return Problem(question.source, question.id, "answer", str(exc),
                           "narrow the parameter ranges or change the formula so it is defined for every draw")
    return None
