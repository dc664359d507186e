"""The cue lint sees the key's length rank over a pool (not only the extremes), keys far longer than
their options, filler options and keys that land on one letter once rendered; the near-duplicate
lint joins questions with one formula over shared grids, near-equal texts, or one's key in the
other. Each test builds a small bank that fails without the check."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from grader.cli import main
from grader.quiz.bank import Question, load_banks
from grader.quiz.cues import (
    RankTest,
    chi_square_p,
    position_problems,
    position_tests,
    rank_shares,
    version_shown,
)
from grader.quiz.duplicates import near_duplicates
from grader.quiz.lint import lint
from grader.quiz.versions import Choice, Item, Version

from .support import COURSE_BANK, course_bank, filler, write_bank

SECOND_LONGEST = ("a key of middling length", ("a distractor that is clearly the longest of all", "short one", "tiny"))
ROTATION = ((40, (20, 22, 24)), (30, (40, 20, 24)), (20, (30, 34, 38)), (26, (32, 36, 20)))  # key rank 1, 2, 4, 3


def single(qid: str, key: str, distractors: tuple[str, ...], pool: str = "exam", text: str = "") -> str:
    options = "\n".join(f'[[questions.options]]\ntext = "{o}"\nexplanation = "why"' for o in (key, *distractors))
    return f'''
[[questions]]
id = "{qid}"
type = "single"
pool = "{pool}"
text = "{text or f"Question {qid}?"}"
answer = "A"
tags = {{ objective = "x", exercise = "general" }}
{options}
'''


def numeric(qid: str, pool: str, text: str, answer: str, parameters: str) -> str:
    return f'''
[[questions]]
id = "{qid}"
type = "numeric"
pool = "{pool}"
precision = {{ sig = 3 }}
text = "{text}"
answer = "{answer}"
tags = {{ objective = "x", exercise = "general" }}
[questions.parameters]
{parameters}
'''


def run_lint(tmp_path: Path, body: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    write_bank(tmp_path / "bank", body)
    code = main(["quiz", "lint", "--bank", str(tmp_path / "bank")])
    return code, capsys.readouterr().err


def balanced(count: int, pool: str, start: int = 0) -> str:
    """`count` unrelated questions whose keys take every length rank in turn."""
    body = ""
    for i in range(start, start + count):
        key, others = ROTATION[i % 4]
        options = (filler(n, f"{pool}{i}:{j}") for j, n in enumerate((key, *others)))
        body += single(f"{pool}{i}", next(options), tuple(options), pool, filler(50, f"{pool}{i}"))
    return body


def test_chi_square_matches_known_quantiles() -> None:
    # 95th percentiles of chi-square at 1..4 degrees of freedom (tables): the tail there is 0.05
    for df, quantile in ((1, 3.841), (2, 5.991), (3, 7.815), (4, 9.488)):
        assert chi_square_p(quantile, df) == pytest.approx(0.05, abs=5e-4)
    assert chi_square_p(0.0, 3) == pytest.approx(1.0)
    assert math.isclose(chi_square_p(2.0, 2), math.exp(-1))


def test_tied_options_share_their_ranks() -> None:
    assert rank_shares([10, 20, 20, 5], 1) == [0.5, 0.5, 0, 0]
    assert rank_shares([10, 20, 30, 5], 0) == [0, 0, 1, 0]


def test_a_pool_whose_keys_are_always_second_longest_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The old lint's blind spot: never the longest, never the shortest, and still a cue."""
    body = "".join(single(f"q{i}", *SECOND_LONGEST, text=f"Stem {i}?") for i in range(20)) + balanced(4, "practice")
    code, err = run_lint(tmp_path, body, capsys)
    assert code == 1
    assert "exam pool: the key's length rank among 4 options is far from uniform: longest 0, 2nd longest 20" in err
    assert "strictly the longest option" not in err


def test_a_balanced_pool_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_lint(tmp_path, balanced(20, "exam") + balanced(20, "practice"), capsys)
    assert code == 0, err


def test_a_small_pool_fails_on_the_share_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Too few questions for the test (2.5 expected per rank), but 6 of 10 keys at one rank is a strategy
    worth 65%."""
    body = "".join(single(f"q{i}", *SECOND_LONGEST, text=f"Stem {i}?") for i in range(6)) + balanced(4, "exam", 9)
    code, err = run_lint(tmp_path, body + balanced(4, "practice"), capsys)
    assert code == 1 and "too few for the test" in err and "no rank above 40%" in err


def test_a_key_over_twice_the_median_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = single("q0", "a key that says far more than any of the other options ever does", ("one", "two", "six"))
    code, err = run_lint(tmp_path, body + balanced(4, "practice"), capsys)
    assert code == 1 and "over 2 times the median option" in err


def test_an_option_ten_times_shorter_than_the_others_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = single("q0", "a plausible key of some length", ("no", "a plausible distractor too", "another one, as long"))
    code, err = run_lint(tmp_path, body + balanced(4, "practice"), capsys)
    assert code == 1 and "field 'options[2].text': the option is 2 characters" in err


def test_rendered_versions_whose_key_is_always_a_fail() -> None:
    """A render that forgot to shuffle: the key's letter is the cue, whatever the lengths."""
    question = Question("q", "single", "?", Path("b.toml"), "x", "general", "exam")
    choices = (Choice("A", "key", "", True), *(Choice(letter, "other", "", False) for letter in "BCD"))
    versions = [Version(n, 1, "Quiz", tuple(Item(i, question, "?", "", choices) for i in range(30))) for n in range(3)]
    tests = position_tests(version_shown(versions))
    assert tests == [RankTest("exam", 4, (90.0, 0.0, 0.0, 0.0), tuple(["q"] * 90))]
    assert "the key's letter is far from uniform: A 90, B 0, C 0, D 0" in str(position_problems(tests, Path("x"))[0])


def test_the_course_banks_render_without_a_cue() -> None:
    """The shipped banks pass every new check, over the banks and over rendered versions, with no warning."""
    report = lint(course_bank(), COURSE_BANK)
    assert not report.problems, "\n".join(map(str, report.problems))
    assert not report.warnings, "\n".join(map(str, report.warnings))
    assert any(s.startswith("20 rendered versions, exam pool: key letter A") for s in report.summaries)


def questions_of(tmp_path: Path, body: str) -> list[Question]:
    write_bank(tmp_path / "bank", body)
    return load_banks(tmp_path / "bank", exercises=()).questions


def test_one_formula_over_overlapping_grids_is_a_duplicate_whatever_the_units(tmp_path: Path) -> None:
    """The issue's bubble pair: a fraction in practice, a percent in the exam, other names and words."""
    body = numeric(
        "frac",
        "practice",
        "Pipeline of {p} stages, {m} micro-batches: idle fraction?",
        "(p - 1) / (m + p - 1)",
        "p = { values = [2, 4, 8] }\nm = { values = [4, 8, 16] }",
    )
    body += numeric(
        "pct",
        "exam",
        "With {S} GPUs in a chain and {M} chunks, what percent waits?",
        "100 * (S - 1) / (M + S - 1)",
        "S = { values = [4, 8] }\nM = { values = [8, 16] }",
    )
    pairs = near_duplicates(questions_of(tmp_path, body))
    assert [(p.first.id, p.second.id) for p in pairs] == [("frac", "pct")]
    assert "the same formula" in pairs[0].reason and "p->S, m->M" in pairs[0].reason


def test_a_formula_with_a_parameter_held_is_a_duplicate(tmp_path: Path) -> None:
    """ZeRO-1 memory is ZeRO stage s memory at s = 1."""
    body = numeric(
        "one",
        "practice",
        "{P} B params, stage 1, {N} GPUs?",
        "P * (4 + 12 / N)",
        "P = { values = [1, 7, 13] }\nN = { values = [4, 8, 16] }",
    )
    body += numeric(
        "any",
        "exam",
        "{P} B params, stage {s}, {N} GPUs?",
        "P * (2 / N ** max(s - 2, 0) + 2 / N ** min(s - 1, 1) + 12 / N)",
        "P = { values = [7, 13] }\ns = { values = [1, 2, 3] }\nN = { values = [8, 16] }",
    )
    pairs = near_duplicates(questions_of(tmp_path, body))
    assert len(pairs) == 1 and "s = 1" in pairs[0].reason


def test_different_formulas_or_disjoint_grids_are_not_duplicates(tmp_path: Path) -> None:
    body = numeric(
        "a",
        "practice",
        "Ring of {W} ranks, {M} MB?",
        "2 * (W - 1) / W * M",
        "W = { values = [2, 4] }\nM = { values = [10, 20] }",
    )
    body += numeric(
        "b",
        "exam",
        "Reduce-scatter of {M} MB over {W}?",
        "(W - 1) / W * M + 1",
        "W = { values = [2, 4] }\nM = { values = [10, 20] }",
    )
    body += numeric(
        "c",
        "exam",
        "Ring over {W} ranks of {M} MB, sent?",
        "2 * (W - 1) / W * M",
        "W = { values = [16, 32] }\nM = { values = [500, 900] }",
    )
    assert near_duplicates(questions_of(tmp_path, body)) == []


def test_near_equal_texts_are_duplicates(tmp_path: Path) -> None:
    stem = "Where does tensor parallelism go on a cluster of eight-GPU nodes joined by InfiniBand?"
    body = single("p", "inside each node", ("across the nodes", "anywhere at all", "on one GPU only"), "practice", stem)
    body += single("e", "within one node", ("across the nodes", "anywhere at all", "on a single GPU"), "exam", stem)
    pairs = near_duplicates(questions_of(tmp_path, body))
    assert len(pairs) == 1 and "text similarity" in pairs[0].reason


def test_a_key_written_in_another_stem_is_a_duplicate(tmp_path: Path) -> None:
    body = single(
        "e",
        "reduce-scatter steps then all-gather steps",
        ("one broadcast", "a tree", "pairs swap"),
        "exam",
        "What does a ring all-reduce run?",
    )
    body += single(
        "x",
        "the same",
        ("half", "twice", "W times"),
        "exam",
        "ZeRO runs reduce-scatter steps then all-gather steps: how much does it send?",
    )
    pairs = near_duplicates(questions_of(tmp_path, body))
    assert len(pairs) == 1 and "'e''s key" in pairs[0].reason and "stem of 'x'" in pairs[0].reason


def test_practice_exam_pairs_fail_and_exam_pairs_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stem = "Which backend should a CPU-only job use for its collectives today?"
    body = single("e1", "gloo, the CPU one", ("nccl, for GPUs", "mpi, if built", "ucc, experimental"), "exam", stem)
    body += single("e2", "gloo, on the CPU", ("nccl, for GPUs", "mpi, if built", "ucc, experimental"), "exam", stem)
    body += balanced(4, "practice") + balanced(8, "exam", 10)
    code, err = run_lint(tmp_path, body, capsys)
    assert code == 0 and "warning:" in err and "near-duplicate of exam question 'e2'" in err
    code, err = run_lint(tmp_path, body.replace('pool = "exam"', 'pool = "practice"', 1), capsys)
    assert code == 1 and "error:" in err and "near-duplicate of practice question 'e1'" in err


def test_no_two_course_questions_are_near_duplicates() -> None:
    questions = course_bank().questions
    assert len(list(itertools.combinations(questions, 2))) > 10_000
    pairs = near_duplicates(questions)
    assert not pairs, [(p.first.id, p.second.id, p.reason) for p in pairs]
