"""Draw quiz versions from a seed: question order, option order and parameter values.

Everything random comes from `random.Random` seeded with strings built from the quiz seed, so a
version is a pure function of (bank, seed, version number) and re-rendering gives the same bytes.
Each (version, question) pair has its own generator, seeded with the version number and the
question id: a question's options are shuffled, and its parameters drawn, independently of every
other version and every other question. One leaked key therefore says nothing about another
version's letters, and a question's variant in version n does not depend on which other questions
were selected (the Moodle variant pools rely on that).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from grader.quiz.bank import LETTERS, PLACEHOLDER, Question
from grader.quiz.formula import FormulaError
from grader.quiz.precision import instruction


@dataclass(frozen=True)
class Choice:
    letter: str
    text: str
    explanation: str
    correct: bool
    source: str = ""  # the option's letter in the bank file, the same in every version


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
    pool: str = "all"


def format_number(value: float, spec: str | None = None) -> str:
    """Print a value as a person would write it: 8 not 8.0, 0.00016 not 0.00016000000000000001."""
    if spec:
        return format(value, spec)
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def exact_number(value: float) -> str:
    """A value with every digit that means something (12 significant figures, float noise gone):
    17155072, not 1.71551e+07; 2.4, not 2.4000000000000004."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}"


def fill(text: str, env: Mapping[str, float]) -> str:
    """Replace `{name}` / `{name:spec}` by the value; braces around other words are left alone."""

    def replace(match: re.Match[str]) -> str:
        name, spec = match.group(1), match.group(2)
        return format_number(env[name], spec) if name in env else match.group(0)

    return PLACEHOLDER.sub(replace, text) if env else text


def select(
    questions: Sequence[Question],
    seed: int,
    tags: Sequence[str] = (),
    count: int | None = None,
    pool: str | None = None,
) -> list[Question]:
    """The questions of the quiz: those of `pool` (None: every pool) matching any tag, then `count`
    of them drawn by the seed."""
    wanted = set(tags)
    chosen = [q for q in questions if (pool is None or q.pool == pool) and (not wanted or wanted & set(q.tags))]
    if count is not None and count < len(chosen):
        picked = set(random.Random(f"select:{seed}").sample(range(len(chosen)), count))
        chosen = [q for i, q in enumerate(chosen) if i in picked]
    return chosen


def draw(questions: Sequence[Question], seed: int, number: int, title: str = "Quiz", pool: str = "all") -> Version:
    """Version `number` (1-based) of a quiz made of `questions`."""
    order = list(questions)
    random.Random(f"order:{seed}:{number}").shuffle(order)
    items = tuple(draw_item(position, question, seed, number) for position, question in enumerate(order, start=1))
    return Version(number, seed, title, items, pool)


def draw_all(
    questions: Sequence[Question], seed: int, versions: int, title: str = "Quiz", pool: str = "all"
) -> list[Version]:
    return [draw(questions, seed, number, title, pool) for number in range(1, versions + 1)]


def draw_item(position: int, question: Question, seed: int, number: int) -> Item:
    """`question` as it appears at `position` in version `number`, from its own generator."""
    rng = random.Random(f"item:{seed}:{number}:{question.id}")
    if question.type == "numeric":
        return _numeric_item(position, question, rng)
    if question.type == "truefalse":
        # The statement's explanation is the general feedback; repeating it per choice would show it twice.
        answer = bool(question.answer_bool)
        choices: tuple[Choice, ...] = (Choice("A", "True", "", answer, "A"), Choice("B", "False", "", not answer, "B"))
        return Item(position, question, question.text, question.explanation, choices)
    options = list(zip(LETTERS, question.options))
    rng.shuffle(options)
    choices = tuple(
        Choice(letter, o.text, o.explanation, o.correct, source) for letter, (source, o) in zip(LETTERS, options)
    )
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


def tolerance(question: Question, value: float) -> float:
    """How far from `value` an answer may be: one unit of the last digit asked for, or the bank's
    own tolerance where that is wider."""
    assert question.precision is not None
    return max(question.precision.unit(value), question.tolerance_abs, question.tolerance_rel * abs(value))


def _numeric_item(position: int, question: Question, rng: random.Random) -> Item:
    params = {p.name: rng.choice(p.values) for p in question.parameters}
    env = evaluate(question, params)
    value = env["answer"]
    shown = {name: value for name, value in env.items() if name != "answer"}
    assert question.precision is not None
    text = f"{fill(question.text, shown).rstrip()}\n\n*{instruction(question.precision, question.unit)}*\n"
    return Item(
        position,
        question,
        text,
        fill(question.explanation, env),
        value=value,
        tolerance=tolerance(question, value),
        params=tuple(params.items()),
    )
