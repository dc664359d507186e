"""Near-duplicate questions, across and within pools: a practice question that is an exam question in
other words gives the exam away, and two exam questions asking one thing count it twice.

Three tests, each cheap enough for every pair:

- the same formula over overlapping parameter grids, whatever the names, wording or units: two
  numeric questions whose answers agree, up to a unit factor (a power of 10 or of 1024), at every
  shared grid point, once one's parameters are mapped onto the other's (a parameter the other lacks
  is held at each of its values in turn);
- high text similarity: the TF-IDF cosine of the stems and options (TEXT_LIMIT, see docs/QUIZZES.md
  for how it was set);
- one question's key written into another's stem, or as one of its options.

A practice/exam pair is an error; an exam/exam pair a warning, since a person must say which to keep.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from grader.judge.tolerance import close_either_way
from grader.quiz.bank import Problem, Question
from grader.quiz.formula import FormulaError
from grader.quiz.versions import evaluate

TEXT_LIMIT = 0.6
KEY_MINIMUM_WORDS = 5  # shorter keys ("gloo", "(Shard(dim=0), Shard(dim=1))") share their few words with many options
KEY_CONTAINED = 0.75  # share of a key's content words found in one stem or option of another question
STOPWORDS = frozenset(
    "a an and are as at be by each every for from in is it its of on one or so that the then this to with".split()
)
POINTS = 48  # grid points compared per parameter mapping
UNITS = sorted({10.0**k for k in range(-12, 13)} | {1024.0**k for k in range(-3, 4)})
WORD = re.compile(r"[a-z0-9_]+")
PLACEHOLDERS = re.compile(r"\{[^{}]*\}")


@dataclass(frozen=True)
class Pair:
    first: Question
    second: Question
    reason: str


def words(text: str) -> list[str]:
    return WORD.findall(PLACEHOLDERS.sub(" ", text.lower()))


def document(question: Question) -> list[str]:
    return words(" ".join([question.text, *(o.text for o in question.options)]))


def tfidf_vectors(documents: Sequence[Sequence[str]]) -> list[dict[str, float]]:
    """Smoothed TF-IDF (idf = ln((1 + N) / (1 + df)) + 1, as scikit-learn's default), L2-normalised."""
    frequency = Counter(word for doc in documents for word in set(doc))
    idf = {word: math.log((1 + len(documents)) / (1 + df)) + 1 for word, df in frequency.items()}
    vectors = []
    for doc in documents:
        vector = {word: count * idf[word] for word, count in Counter(doc).items()}
        norm = math.sqrt(sum(v * v for v in vector.values())) or 1.0
        vectors.append({word: v / norm for word, v in vector.items()})
    return vectors


def cosine(a: dict[str, float], b: dict[str, float]) -> float:
    if len(b) < len(a):
        a, b = b, a
    return sum(v * b.get(word, 0.0) for word, v in a.items())


def _answers(question: Question, points: Sequence[dict[str, float]]) -> list[float | None]:
    values: list[float | None] = []
    for params in points:
        try:
            values.append(evaluate(question, params)["answer"])
        except (FormulaError, ZeroDivisionError, ValueError, OverflowError):
            values.append(None)
    return values


def _unit(ratios: Sequence[float]) -> float | None:
    """The unit factor relating two answer series, if one ratio holds for all and it is a unit."""
    first = ratios[0]
    if any(not close_either_way(r, first, rtol=1e-9, atol=0.0) for r in ratios):
        return None
    return next((u for u in UNITS if close_either_way(first, u, rtol=1e-6, atol=0.0)), None)


def same_formula(a: Question, b: Question) -> str | None:
    """How a's answer is b's on their shared grid (a mapping and a unit), or None."""
    if len(a.parameters) > len(b.parameters):
        a, b = b, a
    if not a.parameters:
        return None
    rng = random.Random(f"duplicates:{a.id}:{b.id}")
    b_values = {p.name: p.values for p in b.parameters}
    for names in itertools.permutations(b_values, len(a.parameters)):
        shared = [sorted(set(p.values) & set(b_values[n])) for p, n in zip(a.parameters, names)]
        if not all(shared):
            continue
        grid = list(itertools.islice(itertools.product(*shared), 4096))
        grid = rng.sample(grid, min(POINTS, len(grid)))
        extras = [n for n in b_values if n not in names]
        if extras and len(a.parameters) < 2:
            continue  # one free parameter against held ones: any two proportional formulas would match
        fixed = list(itertools.islice(itertools.product(*(b_values[n] for n in extras)), 16))
        for held in fixed:
            a_points = [{p.name: v for p, v in zip(a.parameters, point)} for point in grid]
            b_points = [{**dict(zip(names, point)), **dict(zip(extras, held))} for point in grid]
            pairs = [(x, y) for x, y in zip(_answers(a, a_points), _answers(b, b_points)) if x and y]
            if len(pairs) < 2 or len({y for _, y in pairs}) < 2:
                continue
            unit = _unit([x / y for x, y in pairs])
            if unit is not None and (unit == 1 or not extras):
                mapping = ", ".join(f"{p.name}->{n}" for p, n in zip(a.parameters, names))
                held_text = "".join(f", {n} = {v:g}" for n, v in zip(extras, held))
                scale = "" if unit == 1 else f", answers x{1 / unit:g}"
                return f"the same formula over shared parameter values ({mapping}{held_text}{scale})"
    return None


def content(text: str) -> set[str]:
    return {w for w in words(text) if w not in STOPWORDS}


def key_in_other(a: Question, b: Question) -> str | None:
    """a's key said in b's stem or in one of b's options: most of its content words in one place."""
    for key in (o.text for o in a.options if o.correct):
        key_words = content(key)
        if len(key_words) < KEY_MINIMUM_WORDS:
            continue
        for where, text in (("stem", b.text), *((f"option {o.text!r}", o.text) for o in b.options)):
            shared = len(key_words & content(text)) / len(key_words)
            if shared >= KEY_CONTAINED:
                return f"{shared:.0%} of {a.id!r}'s key ({key!r}) is in the {where} of {b.id!r}"
    return None


def near_duplicates(questions: Sequence[Question]) -> list[Pair]:
    """Every practice/exam and exam/exam pair that one of the three tests joins."""
    vectors = tfidf_vectors([document(q) for q in questions])
    pairs = []
    for (i, a), (j, b) in itertools.combinations(enumerate(questions), 2):
        if a.pool == "practice" and b.pool == "practice":
            continue
        reason = None
        if a.type == b.type == "numeric":
            reason = same_formula(a, b)
        wordy = a.type != "numeric" or b.type != "numeric"  # a numeric question is told apart by its formula
        if reason is None and wordy and (similarity := cosine(vectors[i], vectors[j])) >= TEXT_LIMIT:
            reason = f"text similarity {similarity:.2f} (TF-IDF cosine, limit {TEXT_LIMIT})"
        if reason is None:
            reason = key_in_other(a, b) or key_in_other(b, a)
        if reason is not None:
            pairs.append(Pair(a, b, reason))
    return pairs


def duplicate_problems(questions: Sequence[Question]) -> tuple[list[Problem], list[Problem]]:
    """(errors, warnings): practice/exam pairs are errors, exam/exam pairs warnings."""
    errors: list[Problem] = []
    warnings: list[Problem] = []
    for pair in near_duplicates(questions):
        exam, other = (pair.first, pair.second) if pair.first.pool == "exam" else (pair.second, pair.first)
        problem = Problem(
            exam.source,
            exam.id,
            "text",
            f"near-duplicate of {other.pool} question {other.id!r} ({other.source.name}): {pair.reason}",
            "ask something else in one of them (another quantity, another scenario), or drop one"
            if other.pool == "exam"
            else "a practice question must not rehearse an exam question: change what one of them asks",
        )
        (warnings if other.pool == "exam" else errors).append(problem)
    return errors, warnings
