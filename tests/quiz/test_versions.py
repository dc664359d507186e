"""Versions are reproducible from the seed, vary between versions, keep positions fair, and say
nothing about each other: one leaked key must not give another version's letters."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from grader.cli import main
from grader.quiz.versions import draw, draw_all, select

from .support import COURSE_BANK, course_questions

# Chi-square critical values at p = 1e-5 by degrees of freedom: many questions are tested at once,
# so each test is held to a level that keeps a false alarm over the whole bank unlikely.
CHI2_CRITICAL = {1: 19.51, 2: 23.03, 3: 25.90, 4: 28.47, 5: 30.86, 9: 39.34}


def render_tree(out: Path, seed: int, versions: int = 3) -> dict[str, bytes]:
    code = main(
        [
            "quiz",
            "render",
            "--bank",
            str(COURSE_BANK),
            "--format",
            "all",
            "--versions",
            str(versions),
            "--seed",
            str(seed),
            "--count",
            "25",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    return {path.name: path.read_bytes() for path in sorted(out.iterdir())}


def test_same_seed_gives_byte_identical_files(tmp_path: Path) -> None:
    first = render_tree(tmp_path / "a", seed=42)
    second = render_tree(tmp_path / "b", seed=42)
    assert len(first) == 3 * 8 + 1  # 6 formats and 2 keys per version, and the variant pools
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
    """Chi-square over the positions of the right option, per single-choice question."""
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
        assert chi2 < CHI2_CRITICAL[letters - 1], (qid, counts)


def single_choice_letters(versions: int, seed: int) -> dict[str, list[str]]:
    singles = [q for q in course_questions() if q.type == "single" and len(q.options) == 4]
    letters: dict[str, list[str]] = {q.id: [] for q in singles}
    for version in draw_all(singles, seed=seed, versions=versions):
        for item in version.items:
            letters[item.question.id] += item.correct_letters
    return letters


def test_one_version_key_says_nothing_about_the_next() -> None:
    """Across questions and consecutive versions, the right letter of version n + 1 is independent
    of the right letter of version n: no rotation (letter + 1), no repetition, no other pattern."""
    pairs: Counter[tuple[str, str]] = Counter()
    for letters in single_choice_letters(versions=120, seed=31).values():
        pairs.update(zip(letters, letters[1:]))
    total = sum(pairs.values())
    rotated = sum(n for (a, b), n in pairs.items() if ord(b) - 65 == (ord(a) - 65 + 1) % 4)
    repeated = sum(n for (a, b), n in pairs.items() if a == b)
    assert rotated / total < 0.35 and repeated / total < 0.35, (rotated / total, repeated / total)
    # Contingency table of (letter in n, letter in n + 1): independence, 9 degrees of freedom.
    rows = {a: sum(n for (x, _), n in pairs.items() if x == a) for a in "ABCD"}
    columns = {b: sum(n for (_, y), n in pairs.items() if y == b) for b in "ABCD"}
    chi2 = sum(
        (pairs[(a, b)] - rows[a] * columns[b] / total) ** 2 / (rows[a] * columns[b] / total)
        for a in "ABCD"
        for b in "ABCD"
    )
    assert chi2 < CHI2_CRITICAL[9], (chi2, pairs)


def test_a_leaked_key_predicts_no_other_version() -> None:
    """Whatever fixed mapping from version 1's letters an attacker tries (the identity, every shift),
    it finds the right letter of another version about one time in four, never reliably."""
    letters = single_choice_letters(versions=40, seed=8)
    for shift in range(4):
        hits = sum(
            1 for row in letters.values() for later in row[1:] if ord(later) - 65 == (ord(row[0]) - 65 + shift) % 4
        )
        total = sum(len(row) - 1 for row in letters.values())
        assert hits / total < 0.35, (shift, hits / total)


def test_a_question_draws_the_same_variant_whatever_else_is_selected() -> None:
    questions = course_questions()
    for number in (1, 2, 7):
        full = {item.question.id: item for item in draw(questions, seed=5, number=number).items}
        for question in questions[::7]:
            (alone,) = draw([question], seed=5, number=number).items
            assert (alone.choices, alone.params, alone.text) == (
                full[question.id].choices,
                full[question.id].params,
                full[question.id].text,
            )


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
