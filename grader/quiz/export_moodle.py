"""Moodle XML export, built with xml.etree so it is always well formed.

Two layouts: one `<quiz>` per version (a category per exercise, the version's option order kept
with `shuffleanswers` off so the printed key stays right), and the variant pools: one category per
question holding all its distinct variants, so that a quiz slot "random question from category"
gives each student a different variant of the same question.

Texts go out in Moodle's Markdown format, so code blocks survive without an HTML conversion. The
explanation goes to the general feedback only; Moodle shows the general feedback after each
answer's own feedback, so repeating it per answer would print it twice.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from grader.quiz.versions import Item, Version, format_number

# The grade fractions Moodle accepts for an answer (its question/format list); others are refused.
FRACTIONS = (
    "100",
    "90",
    "83.33333",
    "80",
    "75",
    "70",
    "66.66667",
    "60",
    "50",
    "40",
    "33.33333",
    "30",
    "25",
    "20",
    "16.66667",
    "14.28571",
    "12.5",
    "11.11111",
    "10",
    "5",
    "0",
)
KINDS = {"single": "multichoice", "multiple": "multichoice", "numeric": "numerical", "truefalse": "truefalse"}


def fraction(parts: int, negative: bool = False) -> str:
    """Moodle's spelling of 100/parts percent: each of `parts` right answers earns that share and,
    in multiple choice, each wrong pick costs it, matching how `grade` scores."""
    value = f"{100 / parts:.5f}".rstrip("0").rstrip(".")
    if value not in FRACTIONS:
        raise ValueError(f"1/{parts} is not a grade fraction Moodle accepts")
    return f"-{value}" if negative and value != "0" else value


def category_path(version: Version, item: Item) -> str:
    return f"$course$/{version.title}/v{version.number:02d}/{item.question.exercise}"


def pool_path(title: str, question_id: str) -> str:
    return f"$course$/{title}/variant pools/{question_id}"


def _text(parent: ET.Element, tag: str, text: str, markdown: bool = True) -> ET.Element:
    element = ET.SubElement(parent, tag, {"format": "markdown"} if markdown else {})
    ET.SubElement(element, "text").text = text
    return element


def _answer(parent: ET.Element, fraction_value: str, text: str, feedback: str) -> ET.Element:
    answer = ET.SubElement(parent, "answer", {"fraction": fraction_value, "format": "markdown"})
    ET.SubElement(answer, "text").text = text
    _text(answer, "feedback", feedback)
    return answer


def question_element(item: Item, name: str | None = None, idnumber: str | None = None) -> ET.Element:
    question = item.question
    element = ET.Element("question", {"type": KINDS[question.type]})
    _text(element, "name", name or f"q{item.number:02d} {question.id}", markdown=False)
    _text(element, "questiontext", item.text.strip())
    _text(element, "generalfeedback", item.explanation.strip())
    ET.SubElement(element, "defaultgrade").text = format_number(question.points)
    ET.SubElement(element, "penalty").text = "0"
    ET.SubElement(element, "hidden").text = "0"
    ET.SubElement(element, "idnumber").text = idnumber or question.id
    if question.type == "numeric":
        assert item.value is not None
        answer = _answer(element, "100", repr(item.value), "")
        ET.SubElement(answer, "tolerance").text = repr(item.tolerance)
    elif question.type == "truefalse":
        for choice in item.choices:
            _answer(element, "100" if choice.correct else "0", choice.text.lower(), "")
    else:
        right = len(item.correct_letters)
        ET.SubElement(element, "single").text = "true" if question.type == "single" else "false"
        ET.SubElement(element, "shuffleanswers").text = "0"
        ET.SubElement(element, "answernumbering").text = "ABCD"
        for choice in item.choices:
            wrong_value = fraction(right, negative=True) if question.type == "multiple" else "0"
            _answer(
                element, fraction(right) if choice.correct else wrong_value, choice.text, choice.explanation.strip()
            )
    return element


def _category(quiz: ET.Element, path: str, info: str = "") -> None:
    category = ET.SubElement(quiz, "question", {"type": "category"})
    _text(category, "category", path, markdown=False)
    if info:
        _text(category, "info", info)


def _serialize(quiz: ET.Element) -> str:
    ET.indent(quiz)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(quiz, encoding="unicode") + "\n"


def render(version: Version) -> str:
    """The version as a Moodle XML question file, with a category per exercise."""
    quiz = ET.Element("quiz")
    previous = None
    for item in version.items:
        path = category_path(version, item)
        if path != previous:
            _category(quiz, path)
            previous = path
        quiz.append(question_element(item))
    return _serialize(quiz)


def variants(versions: Sequence[Version]) -> dict[str, list[tuple[int, Item]]]:
    """Each question's distinct variants over the versions, as (first version showing it, item),
    questions in the order of their ids."""
    found: dict[str, dict[tuple, tuple[int, Item]]] = {}
    for version in versions:
        for item in version.items:
            signature = (item.text, tuple((c.text, c.correct) for c in item.choices), item.value)
            found.setdefault(item.question.id, {}).setdefault(signature, (version.number, item))
    return {qid: list(found[qid].values()) for qid in sorted(found)}


def render_pools(versions: Sequence[Version]) -> str:
    """One category per question holding all its variants: add a "random question" slot per category."""
    quiz = ET.Element("quiz")
    title = versions[0].title
    for qid, entries in variants(versions).items():
        _category(
            quiz,
            pool_path(title, qid),
            f"{len(entries)} variant(s) of {qid}: add a random question from this category to the quiz.",
        )
        for number, item in entries:
            quiz.append(
                question_element(item, name=f"{qid} (variant of v{number:02d})", idnumber=f"{qid}-v{number:02d}")
            )
    return _serialize(quiz)
