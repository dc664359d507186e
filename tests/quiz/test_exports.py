"""GIFT and Moodle XML exports parse, keep the key, and survive special characters."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.quiz import export_gift, export_moodle
from grader.quiz.bank import load_banks
from grader.quiz.versions import Version, draw, draw_all

from .support import course_questions, write_bank

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
    answers: list[tuple[str, str, str]] = field(default_factory=list)  # (mark, text, feedback)
    numeric: tuple[float, float] | None = None
    truth: bool | None = None
    feedback: str = ""


def parse_gift(source: str) -> tuple[list[str], list[GiftQuestion]]:
    """A small GIFT reader for what the exporter writes: comments, $CATEGORY lines, and questions
    `::title::[markdown]text{answers####feedback}` in which every special character is escaped."""
    categories: list[str] = []
    questions: list[GiftQuestion] = []
    for block in source.strip().split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith("//")]
        if not lines:
            continue
        if lines[0].startswith("$CATEGORY:"):
            assert len(lines) == 1
            categories.append(lines[0].removeprefix("$CATEGORY:").strip())
            continue
        body = "\n".join(lines)
        match = re.fullmatch(r"::((?:\\.|[^\\:])*)::\[markdown\]((?:\\.|[^\\{}])*)\{((?:\\.|[^\\{}])*)\}\n?", body,
                             flags=re.S)
        assert match, f"not a GIFT question: {body!r}"
        title, text, answer_part = match.groups()
        assert "\n" not in text, "raw newline in question text"
        question = GiftQuestion(unescape(title), unescape(text))
        answer_part, _, feedback = answer_part.partition("####")
        question.feedback = unescape(feedback)
        answer_part = answer_part.strip()
        if answer_part in ("TRUE", "FALSE"):
            question.truth = answer_part == "TRUE"
        elif answer_part.startswith("#"):
            value, tolerance = answer_part[1:].split(":")
            question.numeric = (float(value), float(tolerance))
        else:
            for piece in split_unescaped(answer_part, "=~"):
                piece = piece.strip()
                mark, rest = piece[0], piece[1:]
                weight = re.match(r"%(-?[\d.]+)%", rest)
                if weight:
                    mark, rest = f"{mark}{weight.group(1)}", rest[weight.end():]
                text_part, *feedback_part = split_unescaped(rest, "#")
                question.answers.append((mark, unescape(text_part), unescape("".join(feedback_part)[1:])))
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
            assert [m for m, _, _ in parsed.answers] == ["=" if c.correct else "~" for c in item.choices]
            assert [t for _, t, _ in parsed.answers] == [c.text for c in item.choices]
            assert [f for _, _, f in parsed.answers] == [c.explanation.strip() for c in item.choices]
        else:
            weights = [float(m[1:]) for m, _, _ in parsed.answers]
            assert sum(w for w in weights if w > 0) == pytest.approx(100, abs=0.001)
            assert [w > 0 for w in weights] == [c.correct for c in item.choices]


NASTY_TOML = NASTY.replace("\\", "\\\\")  # a TOML basic string needs doubled backslashes
SPECIAL_BANK = f'''
[[questions]]
id = "special"
type = "single"
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
        assert element.find("questiontext").get("format") == "markdown"
        assert element.findtext("idnumber") == item.question.id
        answers = element.findall("answer")
        fractions = [a.get("fraction") for a in answers]
        assert all(f.lstrip("-") in export_moodle.FRACTIONS for f in fractions)
        assert all(a.findtext("feedback/text") for a in answers)
        if item.question.type == "numeric":
            assert element.get("type") == "numerical"
            assert float(answers[0].findtext("text")) == item.value
            assert float(answers[0].findtext("tolerance")) == item.tolerance
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
    assert NASTY in question.findtext("questiontext/text")
    assert NASTY in [a.findtext("text") for a in question.findall("answer")]


@pytest.mark.parametrize(("parts", "expected"), [(1, "100"), (2, "50"), (3, "33.33333"), (4, "25"), (6, "16.66667"),
                                                 (7, "14.28571"), (8, "12.5"), (9, "11.11111"), (10, "10")])
def test_fractions_are_moodle_values(parts: int, expected: str) -> None:
    assert export_moodle.fraction(parts) == expected
    assert export_moodle.fraction(parts, negative=True) == f"-{expected}"


def test_unsupported_fraction_is_refused() -> None:
    with pytest.raises(ValueError, match="not a grade fraction"):
        export_moodle.fraction(11)
