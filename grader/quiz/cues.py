"""Length cues beyond the longest option: the key's length rank over a pool, a key far longer than its
options, options too short to be meant, and where the key lands in rendered versions.

A student who learns that keys are "the second-longest option" scores as well as one who learns that
they are the longest; the per-file longest/shortest measure cannot see that. Over each pool (what a
student meets in one sitting) the key's length rank among its options should be uniform: a
chi-square goodness-of-fit test at the pool's size fails below RANK_ALPHA, and, whatever the test
says on a small pool (from SHARE_MINIMUM questions), any rank's share above 1/n + RANK_MARGIN fails
(a strategy scoring more than 15 points above chance is a cue however it arose). Ties share their
ranks: a key as long as one other option counts half to each of the two, as a student picking
between them would score.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.quiz.bank import LETTERS, Problem, Question
from grader.quiz.versions import Version

RANK_ALPHA = 0.05
RANK_MARGIN = 0.15
RANK_MINIMUM = 5  # the chi-square approximation wants an expected count of 5 per rank
SHARE_MINIMUM = 10  # below, one rank's share says nothing (a pool of 1 has a rank at 100%)
POSITION_ALPHA = 0.001  # shuffles are meant to be exactly uniform: only a systematic bias should fail
LONG_KEY_FACTOR = 2.0
SHORT_OPTION_FACTOR = 10.0
LINT_VERSIONS = 20  # versions rendered per pool by the lint, with LINT_SEED
LINT_SEED = 33


@dataclass(frozen=True)
class Shown:
    """One choice question as a student sees it: its option lengths in order and where its key is."""

    question: str
    pool: str
    lengths: tuple[int, ...]
    key: int


def visible_length(text: str) -> int:
    """Characters a student sees: Markdown's backticks and asterisks are not part of the option."""
    return len(text.replace("`", "").replace("*", "").strip())


def rank_shares(lengths: Sequence[int], key: int) -> list[float]:
    """The key's length rank (0 = longest) as shares over the ranks; tied options split their ranks."""
    above = sum(length > lengths[key] for length in lengths)
    tied = sum(length == lengths[key] for length in lengths)
    shares = [0.0] * len(lengths)
    for rank in range(above, above + tied):
        shares[rank] = 1 / tied
    return shares


def chi_square_p(statistic: float, df: int) -> float:
    """Upper tail of the chi-square distribution, Q(df/2, x/2), by the closed forms for whole df."""
    half = statistic / 2
    if df % 2 == 0:
        term = total = math.exp(-half)
        for i in range(1, df // 2):
            term *= half / i
            total += term
        return min(1.0, total)
    total = math.erfc(math.sqrt(half))
    term = math.exp(-half) * math.sqrt(half) / math.gamma(1.5)
    for i in range(1, (df + 1) // 2):
        total += term
        term *= half / (i + 0.5)
    return min(1.0, total)


@dataclass(frozen=True)
class RankTest:
    """The key-rank (or key-position) counts of one pool's questions with n options, and their test."""

    pool: str
    options: int
    counts: tuple[float, ...]
    questions: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.questions)

    @property
    def p_value(self) -> float | None:
        expected = self.size / self.options
        if expected < RANK_MINIMUM:
            return None
        return chi_square_p(sum((c - expected) ** 2 / expected for c in self.counts), self.options - 1)

    @property
    def limit(self) -> float:
        return 1 / self.options + RANK_MARGIN

    def failing(self, alpha: float) -> bool:
        p = self.p_value
        share = max(self.counts) / self.size
        return (p is not None and p < alpha) or (self.size >= SHARE_MINIMUM and share > self.limit)

    def describe(self, names: Sequence[str]) -> str:
        counts = ", ".join(f"{name} {count:g}" for name, count in zip(names, self.counts))
        p = self.p_value
        test = f"chi-square p = {p:.3g}" if p is not None else f"too few for the test (under {RANK_MINIMUM} a rank)"
        return f"{counts} of {self.size} ({test})"


def rank_names(options: int) -> list[str]:
    ordinals = {2: "2nd", 3: "3rd"}
    middle = [f"{ordinals.get(i, f'{i}th')} longest" for i in range(2, options)]
    return ["longest", *middle, "shortest"]


def rank_tests(shown: Iterable[Shown]) -> list[RankTest]:
    """One test per (pool, number of options), over the key's length ranks."""
    counts: dict[tuple[str, int], list[float]] = {}
    ids: dict[tuple[str, int], list[str]] = defaultdict(list)
    for entry in shown:
        group = (entry.pool, len(entry.lengths))
        total = counts.setdefault(group, [0.0] * group[1])
        for rank, share in enumerate(rank_shares(entry.lengths, entry.key)):
            total[rank] += share
        ids[group].append(entry.question)
    return [RankTest(pool, n, tuple(counts[(pool, n)]), tuple(ids[(pool, n)])) for pool, n in sorted(counts)]


def position_tests(shown: Iterable[Shown]) -> list[RankTest]:
    """One test per (pool, number of options), over the key's letter in the rendered versions."""
    counts: dict[tuple[str, int], list[float]] = {}
    ids: dict[tuple[str, int], list[str]] = defaultdict(list)
    for entry in shown:
        group = (entry.pool, len(entry.lengths))
        counts.setdefault(group, [0.0] * group[1])[entry.key] += 1
        ids[group].append(entry.question)
    return [RankTest(pool, n, tuple(counts[(pool, n)]), tuple(ids[(pool, n)])) for pool, n in sorted(counts)]


def bank_shown(questions: Sequence[Question]) -> list[Shown]:
    """Single-choice questions as written (a version shuffles the order, never the lengths)."""
    return [
        Shown(
            q.id, q.pool, tuple(visible_length(o.text) for o in q.options), [o.correct for o in q.options].index(True)
        )
        for q in questions
        if q.type == "single"
    ]


def version_shown(versions: Sequence[Version]) -> list[Shown]:
    """Single-choice items as rendered: options in the version's order, the key at its letter."""
    return [
        Shown(
            item.question.id,
            item.question.pool,
            tuple(visible_length(c.text) for c in item.choices),
            [c.correct for c in item.choices].index(True),
        )
        for version in versions
        for item in version.items
        if item.question.type == "single"
    ]


def rank_problems(tests: Sequence[RankTest], where: Path, scope: str) -> list[Problem]:
    return [
        Problem(
            where,
            None,
            "options",
            f"{scope}{test.pool} pool: the key's length rank among {test.options} options is far from uniform: "
            f"{test.describe(rank_names(test.options))}; limit p >= {RANK_ALPHA} and no rank above {test.limit:.0%}",
            "change which option is the key's length rank: lengthen some distractors past the key, or shorten "
            "the key below some, until every rank is about as common as the others",
        )
        for test in tests
        if test.failing(RANK_ALPHA)
    ]


def position_problems(tests: Sequence[RankTest], where: Path) -> list[Problem]:
    return [
        Problem(
            where,
            None,
            "options",
            f"rendered versions, {test.pool} pool: the key's letter is far from uniform: "
            f"{test.describe(LETTERS[: test.options])}; limit p >= {POSITION_ALPHA} and no letter above "
            f"{test.limit:.0%}",
            "versions must shuffle every question's options with its own generator (grader/quiz/versions.py)",
        )
        for test in tests
        if test.failing(POSITION_ALPHA)
    ]


def shape_problems(question: Question) -> list[Problem]:
    """A key over twice the median option, or an option a tenth of the others: both seen at a glance."""
    if question.type not in ("single", "multiple"):
        return []
    lengths = [visible_length(o.text) for o in question.options]
    median = statistics.median(lengths)
    problems = []
    for number, (option, length) in enumerate(zip(question.options, lengths), start=1):
        if option.correct and length > LONG_KEY_FACTOR * median:
            problems.append(
                Problem(
                    question.source,
                    question.id,
                    f"options[{number}].text",
                    f"the key is {length} characters, over {LONG_KEY_FACTOR:g} times the median option ({median:g})",
                    "say the key more briefly, or give the distractors the detail the key has",
                )
            )
        others = statistics.median(lengths[: number - 1] + lengths[number:])
        if length * SHORT_OPTION_FACTOR <= others:
            problems.append(
                Problem(
                    question.source,
                    question.id,
                    f"options[{number}].text",
                    f"the option is {length} characters where the others' median is {others:g}: "
                    f"{SHORT_OPTION_FACTOR:g} times shorter, it reads as filler",
                    "write it as a real misconception, as specific as the other options",
                )
            )
    return problems


def summaries(tests: Sequence[RankTest], scope: str = "") -> list[str]:
    return [f"{scope}{t.pool} pool: key length rank {t.describe(rank_names(t.options))}" for t in tests]
