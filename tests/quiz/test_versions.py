"""Versions are reproducible from the seed, vary between versions, and keep positions fair."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from grader.cli import main
from grader.quiz.versions import draw, draw_all, select

from .support import COURSE_BANK, course_questions


def render_tree(out: Path, seed: int, versions: int = 3) -> dict[str, bytes]:
    code = main(["quiz", "render", "--bank", str(COURSE_BANK), "--format", "all", "--versions", str(versions),
                 "--seed", str(seed), "--count", "25", "--out", str(out)])
    assert code == 0
    return {path.name: path.read_bytes() for path in sorted(out.iterdir())}


def test_same_seed_gives_byte_identical_files(tmp_path: Path) -> None:
    first = render_tree(tmp_path / "a", seed=42)
    second = render_tree(tmp_path / "b", seed=42)
    assert len(first) == 3 * 7
    assert first == second


def test_different_seeds_differ(tmp_path: Path) -> None:
    first = render_tree(tmp_path / "a", seed=1)
    second = render_tree(tmp_path / "b", seed=2)
    assert first.keys() == second.keys()
    assert all(first[name] != second[name] for name in first)


def test_versions_differ_in_order_options_and_parameters() -> None:
    one, two = draw_all(course_questions(), seed=7, versions=2)
    assert [i.question.id for i in one.items] != [i.question.id for i in two.items]
    assert sorted(i.question.id for i in one.items) == sorted(i.question.id for i in two.items)
    options = {i.question.id: [c.text for c in i.choices] for i in one.items}
    assert any(options[i.question.id] != [c.text for c in i.choices] for i in two.items if i.choices)
    params = {i.question.id: i.params for i in one.items}
    assert any(params[i.question.id] != i.params for i in two.items if i.params)


def test_correct_position_is_spread_evenly_over_200_versions() -> None:
    """Chi-square over the positions of the right option, per single-choice question: the statistic
    stays far below the 0.1% critical value for the degrees of freedom (16.27 for 3)."""
    singles = [q for q in course_questions() if q.type == "single"]
    positions: dict[str, Counter[str]] = {q.id: Counter() for q in singles}
    for version in draw_all(singles, seed=2024, versions=200):
        for item in version.items:
            (letter,) = item.correct_letters
            positions[item.question.id][letter] += 1
    for qid, counts in positions.items():
        letters = len(next(q for q in singles if q.id == qid).options)
        expected = 200 / letters
        chi2 = sum((counts[chr(65 + i)] - expected) ** 2 / expected for i in range(letters))
        assert chi2 < 16.27, (qid, counts)


def test_no_version_repeats_an_option_or_a_question() -> None:
    for version in draw_all(course_questions(), seed=3, versions=200):
        ids = [item.question.id for item in version.items]
        assert len(ids) == len(set(ids))
        for item in version.items:
            texts = [c.text for c in item.choices]
            assert len(texts) == len(set(texts))
            if item.question.type in ("single", "multiple"):
                assert sorted(texts) == sorted(o.text for o in item.question.options)
            assert [c.letter for c in item.choices] == [chr(65 + i) for i in range(len(texts))]


def test_multiple_choice_keeps_the_right_set() -> None:
    multiples = [q for q in course_questions() if q.type == "multiple"]
    for number in range(1, 30):
        for item in draw(multiples, seed=9, number=number).items:
            right = sorted(c.text for c in item.choices if c.correct)
            assert right == sorted(o.text for o in item.question.options if o.correct)


def test_select_by_tags_and_count() -> None:
    questions = course_questions()
    ring = select(questions, seed=0, tags=["ex08_ring_allreduce"])
    assert ring and all(q.exercise == "ex08_ring_allreduce" for q in ring)
    assert len(select(questions, seed=0, tags=["zero", "amdahl"])) > len(select(questions, seed=0, tags=["amdahl"]))
    picked = select(questions, seed=5, count=10)
    assert len(picked) == 10 and picked == select(questions, seed=5, count=10)
    assert picked != select(questions, seed=6, count=10)
