"""`grader quiz lint` beyond the format: answers that can be computed, pools that hold apart, and
options whose form gives the key away.

Test-wise students pick the longest option, or the set of longest options, or "all of the above";
an exam whose keys follow such a pattern measures test-wiseness. The length measures are taken per
bank file (a bank is written in one sitting, and its habits show there) and fail above a limit set
a little over what chance gives: 35% of single-choice questions whose key is strictly the longest
(or strictly the shortest) option, and 1/k + 0.15 of multiple-choice questions whose k right options
are exactly the k longest (or shortest).
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.quiz import cues
from grader.quiz.bank import POOLS, Bank, Problem, Question
from grader.quiz.cues import visible_length
from grader.quiz.duplicates import duplicate_problems
from grader.quiz.formula import FormulaError
from grader.quiz.precision import is_whole
from grader.quiz.versions import draw_all, evaluate

SINGLE_LIMIT = 0.35
MULTIPLE_MARGIN = 0.15
TRUEFALSE_LIMIT = 0.70
TRUEFALSE_MINIMUM = 4  # fewer true/false questions than this say nothing about balance
# Options that point at other options break when options are shuffled, and they are classic tells.
POINTING = re.compile(
    r"\b(?:all|none|both|neither|either)\s+(?:of\s+)?(?:the\s+)?(?:above|below|previous|preceding|others|other\s+options)\b"
    r"|\b(?:all|none|both|neither)\s+of\s+(?:these|those)\b"
    r"|\b(?:options?|answers?|choices?)\s+\(?(?-i:[A-J])\)?(?![\w'])"
    r"|\b(?:both|either|neither)\s+(?-i:[A-J])\s+(?:and|or|nor)\s+(?-i:[A-J])\b",
    re.IGNORECASE,
)


@dataclass
class LengthMeasure:
    """The length tells of one bank file: counts of questions showing each pattern."""

    file: Path
    singles: list[str] = field(default_factory=list)
    longest: list[str] = field(default_factory=list)
    shortest: list[str] = field(default_factory=list)
    multiples: list[str] = field(default_factory=list)
    chance: list[float] = field(default_factory=list)  # 1/k for each multiple-choice question
    set_longest: list[str] = field(default_factory=list)
    set_shortest: list[str] = field(default_factory=list)

    @property
    def multiple_limit(self) -> float:
        return sum(self.chance) / len(self.chance) + MULTIPLE_MARGIN if self.chance else 1.0

    def summary(self) -> str:
        parts = []
        if self.singles:
            parts.append(
                f"single choice: key longest {_share(self.longest, self.singles)}, "
                f"shortest {_share(self.shortest, self.singles)} (limit {SINGLE_LIMIT:.0%})"
            )
        if self.multiples:
            parts.append(
                f"multiple choice: right set longest {_share(self.set_longest, self.multiples)}, "
                f"shortest {_share(self.set_shortest, self.multiples)} (limit {self.multiple_limit:.0%})"
            )
        return f"{self.file.name}: {'; '.join(parts) or 'no choice questions'}"


def _share(hits: Sequence[str], total: Sequence[str]) -> str:
    return f"{len(hits)}/{len(total)} ({len(hits) / len(total):.0%})"


def measure_lengths(questions: Sequence[Question], file: Path) -> LengthMeasure:
    measure = LengthMeasure(file)
    for question in questions:
        if question.type not in ("single", "multiple"):
            continue
        right = [visible_length(o.text) for o in question.options if o.correct]
        wrong = [visible_length(o.text) for o in question.options if not o.correct]
        if question.type == "single":
            measure.singles.append(question.id)
            if right[0] > max(wrong):
                measure.longest.append(question.id)
            if right[0] < min(wrong):
                measure.shortest.append(question.id)
        else:
            measure.multiples.append(question.id)
            measure.chance.append(1 / len(right))
            if min(right) > max(wrong):
                measure.set_longest.append(question.id)
            if max(right) < min(wrong):
                measure.set_shortest.append(question.id)
    return measure


def length_problems(measure: LengthMeasure) -> list[Problem]:
    problems = []
    fix_single = "vary the lengths: write distractors as specific as the key, or say the key more briefly"
    for name, hits in (("longest", measure.longest), ("shortest", measure.shortest)):
        if measure.singles and len(hits) / len(measure.singles) > SINGLE_LIMIT:
            problems.append(
                Problem(
                    measure.file,
                    None,
                    "options",
                    f"the key is strictly the {name} option in {_share(hits, measure.singles)} of the "
                    f"single-choice questions (limit {SINGLE_LIMIT:.0%}): {', '.join(hits)}",
                    fix_single,
                )
            )
    for name, hits in (("longest", measure.set_longest), ("shortest", measure.set_shortest)):
        if measure.multiples and len(hits) / len(measure.multiples) > measure.multiple_limit:
            problems.append(
                Problem(
                    measure.file,
                    None,
                    "options",
                    f"the right options are exactly the {name} ones in "
                    f"{_share(hits, measure.multiples)} of the multiple-choice questions "
                    f"(limit {measure.multiple_limit:.0%}): {', '.join(hits)}",
                    "make some distractors as long as the right options, or some right options short",
                )
            )
    return problems


def pointing_problems(question: Question) -> list[Problem]:
    """Options such as "all of the above" or "both A and C": tells, and wrong once options are shuffled."""
    return [
        Problem(
            question.source,
            question.id,
            f"options[{number}].text",
            f"{match.group(0)!r} points at other options",
            "state the option's own content; versions shuffle options, so 'above' and letters change",
        )
        for number, option in enumerate(question.options, start=1)
        if (match := POINTING.search(option.text))
    ]


def pool_problems(questions: Sequence[Question], directory: Path) -> list[Problem]:
    """Both pools hold questions, and no question text sits in both (an exam must not be practised)."""
    problems = []
    for pool in POOLS:
        if not any(q.pool == pool for q in questions):
            problems.append(
                Problem(directory, None, "pool", f"the {pool} pool is empty", f'set pool = "{pool}" on some questions')
            )
    by_text: dict[str, dict[str, Question]] = defaultdict(dict)
    for question in questions:
        by_text[" ".join(question.text.lower().split())].setdefault(question.pool, question)
    for pools in by_text.values():
        if len(pools) > 1:
            exam, practice = pools["exam"], pools["practice"]
            problems.append(
                Problem(
                    exam.source,
                    exam.id,
                    "text",
                    f"the same text is practice question {practice.id!r} ({practice.source.name})",
                    "keep each question text in one pool: reword one of them or move it",
                )
            )
    return problems


def truefalse_problems(questions: Sequence[Question], directory: Path) -> list[Problem]:
    """True/false keys that lean one way are a tell of their own ("when in doubt, answer false")."""
    answers = [q.answer_bool for q in questions if q.type == "truefalse"]
    if len(answers) < TRUEFALSE_MINIMUM:
        return []
    falses = answers.count(False) / len(answers)
    if max(falses, 1 - falses) <= TRUEFALSE_LIMIT:
        return []
    leaning = "false" if falses > 0.5 else "true"
    return [
        Problem(
            directory,
            None,
            "answer",
            f"{max(falses, 1 - falses):.0%} of the {len(answers)} true/false statements are {leaning} "
            f"(limit {TRUEFALSE_LIMIT:.0%})",
            "turn some statements around so both answers are common",
        )
    ]


def probe(question: Question, tries: int = 40) -> Problem | None:
    """Evaluate a numeric question at its extremes and at random parameter values, so that a
    division by zero, or a fraction where an exact whole number is asked, shows up in `lint`, not in
    front of a class."""
    if question.type != "numeric":
        return None
    rng = random.Random(f"probe:{question.id}")
    draws = [{p.name: min(p.values) for p in question.parameters}, {p.name: max(p.values) for p in question.parameters}]
    draws += [{p.name: rng.choice(p.values) for p in question.parameters} for _ in range(tries)]
    for params in draws:
        try:
            value = evaluate(question, params)["answer"]
        except FormulaError as exc:
            return Problem(
                question.source,
                question.id,
                "answer",
                str(exc),
                "narrow the parameter ranges or change the formula so it is defined for every draw",
            )
        if question.precision is not None and question.precision.kind == "exact" and not is_whole(value):
            return Problem(
                question.source,
                question.id,
                "precision",
                f"an exact whole number is asked, but the answer is {value:.6g} with {params}",
                "ask for significant figures or decimals, e.g. precision = { sig = 3 }",
            )
    return None


@dataclass
class Report:
    """What `lint` found: errors, warnings (exam/exam near-duplicates) and the measures to print."""

    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)


def rendered_problems(questions: Sequence[Question], directory: Path) -> tuple[list[Problem], list[str]]:
    """The rank cue in each rendered version (a student's sample: the same questions again are no new
    evidence), and the key's letter over all of them (each item shuffled by its own generator, so
    the versions are independent draws): shuffling must not make a cue."""
    problems, summaries, shown = [], [], []
    scope = f"{cues.LINT_VERSIONS} rendered versions, "
    for pool in POOLS:
        chosen = [q for q in questions if q.pool == pool and q.type == "single"]  # numeric draws: see probe
        versions = draw_all(chosen, cues.LINT_SEED, cues.LINT_VERSIONS, pool=pool) if chosen else []
        failing = [(v.number, cues.rank_tests(cues.version_shown([v]))) for v in versions]
        failing = [(number, tests) for number, tests in failing if any(t.failing(cues.RANK_ALPHA) for t in tests)]
        if failing:
            number, tests = failing[0]
            problems += cues.rank_problems(tests, directory, f"{len(failing)} of {scope}e.g. version {number}, ")
        shown += cues.version_shown(versions)
    positions = cues.position_tests(shown)
    problems += cues.position_problems(positions, directory)
    summaries += [f"{scope}{t.pool} pool: key letter {t.describe(cues.LETTERS[: t.options])}" for t in positions]
    return problems, summaries


def lint(bank: Bank, directory: Path) -> Report:
    """Every problem beyond the format, the warnings, and the measures of each bank file and pool."""
    report = Report()
    problems = report.problems
    for question in bank.questions:
        if (problem := probe(question)) is not None:
            problems.append(problem)
        problems.extend(pointing_problems(question))
        problems.extend(cues.shape_problems(question))
    for file in bank.files:
        measure = measure_lengths([q for q in bank.questions if q.source == file], file)
        report.summaries.append(measure.summary())
        problems.extend(length_problems(measure))
    ranks = cues.rank_tests(cues.bank_shown(bank.questions))
    report.summaries.extend(cues.summaries(ranks))
    problems.extend(cues.rank_problems(ranks, directory, ""))
    rendered, rendered_summaries = rendered_problems(bank.questions, directory)
    problems.extend(rendered)
    report.summaries.extend(rendered_summaries)
    problems.extend(pool_problems(bank.questions, directory))
    problems.extend(truefalse_problems(bank.questions, directory))
    errors, report.warnings = duplicate_problems(bank.questions)
    problems.extend(errors)
    return report
