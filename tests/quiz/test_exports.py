"""GIFT and Moodle XML exports parse, keep the key, survive special characters, say what they cannot
carry, and never show a feedback twice; the variant pools hold every variant of each question."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.quiz import export_gift, export_moodle
from grader.quiz.bank import load_banks
from grader.quiz.versions import Version, draw, draw_all

from .support import attribute, child_text, course_questions, find_child, write_bank

NASTY = r"Braces {x}, tilde ~, equals =, hash #, colon a:b, backslash C:\temp and \n, percent 50%"


def unescape(text: str) -> str:
    """Undo GIFT escaping: \\n is a newline, a backslash before any other character keeps it."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text, flags=re.S)


def split_unescaped(text: str, separators: str) -> list[str]:
    """Cut `text` before every unescaped separator character (the separator starts the piece)."""
    pieces, current, index = [], "", 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            current += text[index : index + 2]
            index += 2
            continue
        if char in separators and current:
            pieces.append(current)
            current = ""
        current += char
        index += 1
    return pieces + [current] if current else pieces


@dataclass
class GiftQuestion:
    title: str
    text: str
    answers: list[tuple[float, str, str]] = field(default_factory=list)  # (weight in %, text, feedback)
    numeric: tuple[float, float] | None = None
    truth: bool | None = None
    feedback: str = ""
    note: str = ""  # the // comment lines before the question


# What Moodle's GIFT reader (question/format/gift/format.php) does with an answer: a leading `=` is
# full marks, a leading `%n%` is a weight, and a leading `[format]` that names a known format is taken
# off the text. Neither `%` nor `[` can be escaped, so the exporter must keep them from being read.
MOODLE_WEIGHT = re.compile(r"^%-*([0-9]{1,2})\.?([0-9]*)%")
FORMATS = ("moodle", "html", "plain", "markdown")


def moodle_text(raw: str) -> str:
    """parse_text_with_format: a known [format] prefix is removed, then escapes are undone."""
    raw = raw.strip()
    if raw.startswith("[") and "]" in raw and raw[1 : raw.index("]")] in FORMATS:
        raw = raw[raw.index("]") + 1 :]
    return unescape(raw).strip()


def moodle_answer(piece: str) -> tuple[float, str, str]:
    """One `=...` or `~...` piece as Moodle reads it: weight, text, feedback."""
    if piece.startswith("="):
        weight, rest = 100.0, piece[1:]
    else:
        rest = piece[1:]
        match = MOODLE_WEIGHT.match(rest)
        if match:
            end = rest.index("%", 1)
            weight, rest = float(rest[1:end]), rest[end + 1 :]
        else:
            weight = 0.0
    text_part, *feedback_part = split_unescaped(rest, "#")
    return weight, moodle_text(text_part), moodle_text("".join(feedback_part)[1:])


def parse_gift(source: str) -> tuple[list[str], list[GiftQuestion]]:
    """A small GIFT reader for what the exporter writes: comments, $CATEGORY lines, and questions
    `::title::[markdown]text{answers####feedback}` in which every special character is escaped."""
    categories: list[str] = []
    questions: list[GiftQuestion] = []
    for block in source.strip().split("\n\n"):
        note = "\n".join(line for line in block.splitlines() if line.startswith("//"))
        lines = [line for line in block.splitlines() if not line.startswith("//")]
        if not lines:
            continue
        if lines[0].startswith("$CATEGORY:"):
            assert len(lines) == 1
            categories.append(lines[0].removeprefix("$CATEGORY:").strip())
            continue
        body = "\n".join(lines)
        match = re.fullmatch(
            r"::((?:\\.|[^\\:])*)::\[markdown\]((?:\\.|[^\\{}])*)\{((?:\\.|[^\\{}])*)\}\n?", body, flags=re.S
        )
        assert match, f"not a GIFT question: {body!r}"
        title, text, answer_part = match.groups()
        assert "\n" not in text, "raw newline in question text"
        question = GiftQuestion(unescape(title), unescape(text), note=note)
        answer_part, _, feedback = answer_part.partition("####")
        question.feedback = moodle_text(feedback)
        answer_part = answer_part.strip()
        if answer_part in ("TRUE", "FALSE"):
            question.truth = answer_part == "TRUE"
        elif answer_part.startswith("#"):
            value, tolerance = answer_part[1:].split(":")
            question.numeric = (float(value), float(tolerance))
        else:
            question.answers = [moodle_answer(piece.strip()) for piece in split_unescaped(answer_part, "=~")]
        questions.append(question)
    return categories, questions


@pytest.fixture(scope="module")
def version() -> Version:
    return draw(course_questions(), seed=4, number=2)


def test_gift_parses_and_matches_the_key(version: Version) -> None:
    categories, questions = parse_gift(export_gift.render(version))
    assert len(questions) == len(version.items)
    assert {c.rsplit("/", 1)[1] for c in categories} == {i.question.exercise for i in version.items}
    for item, parsed in zip(version.items, questions):
        assert parsed.title == f"q{item.number:02d} {item.question.id}"
        assert parsed.text == item.text.strip()
        if item.question.type == "numeric":
            assert parsed.numeric == (item.value, item.tolerance)
        elif item.question.type == "truefalse":
            assert parsed.truth == item.choices[0].correct
        elif item.question.type == "single":
            assert [w for w, _, _ in parsed.answers] == [100 if c.correct else 0 for c in item.choices]
            assert [t for _, t, _ in parsed.answers] == [c.text for c in item.choices]
            assert [f for _, _, f in parsed.answers] == [c.explanation.strip() for c in item.choices]
        else:
            weights = [w for w, _, _ in parsed.answers]
            assert sum(w for w in weights if w > 0) == pytest.approx(100, abs=0.001)
            assert [w > 0 for w in weights] == [c.correct for c in item.choices]
            assert [t for _, t, _ in parsed.answers] == [c.text for c in item.choices]


NASTY_TOML = NASTY.replace("\\", "\\\\")  # a TOML basic string needs doubled backslashes
SPECIAL_BANK = f'''
[[questions]]
id = "special"
type = "single"
pool = "exam"
text = """
{NASTY_TOML}

```python
d = {{"k": 1}}  # a dict: colon, braces, hash
```
"""
answer = "A"
tags = {{ objective = "escaping", exercise = "general" }}
[[questions.options]]
text = "{NASTY_TOML}"
explanation = "right = {{yes}}"
[[questions.options]]
text = "plain ~ wrong"
explanation = "wrong: no # here"
'''


def test_special_characters_survive_gift_round_trip(tmp_path: Path) -> None:
    write_bank(tmp_path / "bank", SPECIAL_BANK)
    bank = load_banks(tmp_path / "bank")
    assert not bank.problems, bank.problems
    item = draw(bank.questions, seed=1, number=1).items[0]
    assert NASTY in item.text
    _, (parsed,) = parse_gift(export_gift.render(draw(bank.questions, seed=1, number=1)))
    assert parsed.text == item.text.strip()
    assert {t for _, t, _ in parsed.answers} == {NASTY, "plain ~ wrong"}
    assert {f for _, _, f in parsed.answers} == {"right = {yes}", "wrong: no # here"}


def test_gift_escape_covers_every_special_character() -> None:
    assert export_gift.escape("~=#{}:\\") == "\\~\\=\\#\\{\\}\\:\\\\"
    assert export_gift.escape("a\nb") == "a\\nb"


def test_moodle_xml_is_well_formed_and_matches_the_key(version: Version) -> None:
    root = ET.fromstring(export_moodle.render(version).encode("utf-8"))
    assert root.tag == "quiz"
    questions = [q for q in root.findall("question") if q.get("type") != "category"]
    assert len(questions) == len(version.items)
    for item, element in zip(version.items, questions):
        assert element.findtext("questiontext/text") == item.text.strip()
        assert attribute(find_child(element, "questiontext"), "format") == "markdown"
        assert element.findtext("idnumber") == item.question.id
        answers = element.findall("answer")
        fractions = [attribute(a, "fraction") for a in answers]
        assert all(f.lstrip("-") in export_moodle.FRACTIONS for f in fractions)
        if item.question.type == "numeric":
            assert element.get("type") == "numerical"
            assert float(child_text(answers[0], "text")) == item.value
            assert float(child_text(answers[0], "tolerance")) == item.tolerance
        elif item.question.type in ("single", "multiple"):
            assert element.get("type") == "multichoice"
            assert element.findtext("single") == ("true" if item.question.type == "single" else "false")
            assert [a.findtext("text") for a in answers] == [c.text for c in item.choices]
            assert [float(f) > 0 for f in fractions] == [c.correct for c in item.choices]
            assert sum(float(f) for f in fractions if float(f) > 0) == pytest.approx(100, abs=0.001)


def test_moodle_xml_special_characters_round_trip(tmp_path: Path) -> None:
    write_bank(tmp_path / "bank", SPECIAL_BANK)
    (version,) = draw_all(load_banks(tmp_path / "bank").questions, seed=1, versions=1)
    root = ET.fromstring(export_moodle.render(version))
    (question,) = root.findall("question[@type='multichoice']")
    assert NASTY in child_text(question, "questiontext/text")
    assert NASTY in [a.findtext("text") for a in question.findall("answer")]


def test_moodle_xml_shows_each_explanation_once(version: Version) -> None:
    """Moodle prints an answer's own feedback and then the general feedback: the explanation must be
    in one of them only (true/false and numeric answers used to repeat it)."""
    root = ET.fromstring(export_moodle.render(version))
    questions = [q for q in root.findall("question") if q.get("type") != "category"]
    for item, element in zip(version.items, questions):
        general = element.findtext("generalfeedback/text") or ""
        feedbacks = [a.findtext("feedback/text") or "" for a in element.findall("answer")]
        assert general == item.explanation.strip()
        for feedback in feedbacks:
            assert not (general and feedback and (general in feedback or feedback in general)), (
                item.question.id,
                feedback,
            )
        if item.question.type in ("single", "multiple"):
            assert feedbacks == [c.explanation.strip() for c in item.choices]


CHOICE_TRAPS_BANK = """
[[questions]]
id = "traps"
type = "single"
pool = "exam"
text = "Which text does Moodle show unchanged?"
answer = "A"
tags = { objective = "escaping", exercise = "general" }
[[questions.options]]
text = "%50% of the gradients"
explanation = "[html] is not a format here"
[[questions.options]]
text = "[html] <b>bold</b> tag"
explanation = "%25% is not a weight here"
[[questions.options]]
text = "[markdown] and [plain] as words"
explanation = "plain"

[[questions]]
id = "traps-multi"
type = "multiple"
pool = "exam"
text = "Pick both."
answer = ["A", "B"]
tags = { objective = "escaping", exercise = "general" }
[[questions.options]]
text = "%100% sure"
explanation = "weights only where the exporter writes them"
[[questions.options]]
text = "[moodle] format word"
explanation = "kept"
[[questions.options]]
text = "%-50% penalty"
explanation = "not a weight"
"""


def test_gift_choices_starting_with_a_weight_or_a_format_are_read_literally(tmp_path: Path) -> None:
    write_bank(tmp_path / "bank", CHOICE_TRAPS_BANK)
    bank = load_banks(tmp_path / "bank")
    assert not bank.problems, bank.problems
    version = draw(bank.questions, seed=2, number=1)
    _, parsed = parse_gift(export_gift.render(version))
    for item, question in zip(version.items, parsed):
        assert [t for _, t, _ in question.answers] == [c.text for c in item.choices]
        assert [f for _, _, f in question.answers] == [c.explanation for c in item.choices]
        if item.question.type == "single":
            assert [w for w, _, _ in question.answers] == [100 if c.correct else 0 for c in item.choices]
        else:
            assert [w > 0 for w, _, _ in question.answers] == [c.correct for c in item.choices]


def test_gift_says_which_questions_it_imports_at_the_wrong_mark(version: Version) -> None:
    """GIFT has no field for marks: every 2-point question is named in the header and in a comment
    right before it, with the mark to set; 1-point questions get no comment."""
    source = export_gift.render(version)
    header = source.split("\n\n", 1)[0]
    assert "GIFT has no field for marks" in header
    _, parsed = parse_gift(source)
    for item, question in zip(version.items, parsed):
        if item.question.points != 1:
            assert f"q{item.number:02d} {item.question.id}" in header
            assert f"worth {item.question.points:g} points" in question.note
            assert f"set its default mark to {item.question.points:g}" in question.note
        else:
            assert not question.note


def test_moodle_variant_pools_hold_every_variant_of_each_question(tmp_path: Path) -> None:
    questions = [q for q in course_questions() if q.id in ("ring-volume", "pg-backend", "pg-cleanup", "ring-time")]
    versions = draw_all(questions, seed=6, versions=12)
    root = ET.fromstring(export_moodle.render_pools(versions))
    pools: dict[str, list[ET.Element]] = {}
    current = None
    for element in root.findall("question"):
        if element.get("type") == "category":
            current = child_text(element, "category/text")
            assert current not in pools
            pools[current] = []
        else:
            assert current is not None
            pools[current].append(element)
    assert sorted(path.rsplit("/", 1)[1] for path in pools) == sorted(q.id for q in questions)
    for path, elements in pools.items():
        qid = path.rsplit("/", 1)[1]
        ids = [e.findtext("idnumber") for e in elements]
        assert len(ids) == len(set(ids)), "Moodle needs idnumbers unique within a category"
        items = [item for v in versions for item in v.items if item.question.id == qid]
        distinct = {(i.text, tuple((c.text, c.correct) for c in i.choices), i.value) for i in items}
        assert len(elements) == len(distinct)
        texts = {e.findtext("questiontext/text") for e in elements}
        assert texts == {i.text.strip() for i in items}
        if qid in ("ring-volume", "ring-time"):
            assert len({e.findtext("answer/text") for e in elements}) > 1, "parametric variants differ"


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        (1, "100"),
        (2, "50"),
        (3, "33.33333"),
        (4, "25"),
        (6, "16.66667"),
        (7, "14.28571"),
        (8, "12.5"),
        (9, "11.11111"),
        (10, "10"),
    ],
)
def test_fractions_are_moodle_values(parts: int, expected: str) -> None:
    assert export_moodle.fraction(parts) == expected
    assert export_moodle.fraction(parts, negative=True) == f"-{expected}"


def test_unsupported_fraction_is_refused() -> None:
    with pytest.raises(ValueError, match="not a grade fraction"):
        export_moodle.fraction(11)
