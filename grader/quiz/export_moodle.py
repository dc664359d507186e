"""Moodle XML export: one `<quiz>` per version, built with xml.etree so it is always well formed.

Texts go out in Moodle's Markdown format, so code blocks survive without an HTML conversion.
Options keep the version's order (`shuffleanswers` off) so the printed key stays right.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from grader.quiz.versions import Item, Version, format_number

# The grade fractions Moodle accepts for an answer (its question/format list); others are refused.
FRACTIONS = ("100", "90", "83.33333", "80", "75", "70", "66.66667", "60", "50", "40", "33.33333", "30",
             "25", "20", "16.66667", "14.28571", "12.5", "11.11111", "10", "5", "0")


def fraction(parts: int, negative: bool = False) -> str:
    """Moodle's spelling of 100/parts percent: each of `parts` right answers earns that share and,
    in multiple choice, each wrong pick costs it, matching how `grade` scores."""
    value = f"{100 / parts:.5f}".rstrip("0").rstrip(".")
    if value not in FRACTIONS:
        raise ValueError(f"1/{parts} is not a grade fraction Moodle accepts")
    return f"-{value}" if negative and value != "0" else value


def category_path(version: Version, item: Item) -> str:
    return f"$course$/{version.title}/v{version.number:02d}/{item.question.exercise}"


def _text(parent: ET.Element, tag: str, text: str, markdown: bool = True) -> ET.Element:
    element = ET.SubElement(parent, tag, {"format": "markdown"} if markdown else {})
    ET.SubElement(element, "text").text = text
    return element


def _answer(parent: ET.Element, fraction_value: str, text: str, feedback: str) -> ET.Element:
    answer = ET.SubElement(parent, "answer", {"fraction": fraction_value, "format": "markdown"})
    ET.SubElement(answer, "text").text = text
    _text(answer, "feedback", feedback)
    return answer


def question_element(item: Item) -> ET.Element:
    question = item.question
    kind = {"single": "multichoice", "multiple": "multichoice", "numeric": "numerical", "truefalse": "truefalse"}
    element = ET.Element("question", {"type": kind[question.type]})
    _text(element, "name", f"q{item.number:02d} {question.id}", markdown=False)
    _text(element, "questiontext", item.text.strip())
    _text(element, "generalfeedback", item.explanation.strip())
    ET.SubElement(element, "defaultgrade").text = format_number(question.points)
    ET.SubElement(element, "penalty").text = "0"
    ET.SubElement(element, "hidden").text = "0"
    ET.SubElement(element, "idnumber").text = question.id
    if question.type == "numeric":
        assert item.value is not None
        answer = _answer(element, "100", repr(item.value), item.explanation.strip())
        ET.SubElement(answer, "tolerance").text = repr(item.tolerance)
    elif question.type == "truefalse":
        for choice in item.choices:
            _answer(element, "100" if choice.correct else "0", choice.text.lower(), choice.explanation.strip())
    else:
        right = len(item.correct_letters)
        ET.SubElement(element, "single").text = "true" if question.type == "single" else "false"
        ET.SubElement(element, "shuffleanswers").text = "0"
        ET.SubElement(element, "answernumbering").text = "ABCD"
        for choice in item.choices:
            wrong_value = fraction(right, negative=True) if question.type == "multiple" else "0"
            _answer(element, fraction(right) if choice.correct else wrong_value, choice.text, choice.explanation.strip())
    return element


def render(version: Version) -> str:
    """The version as a Moodle XML question file, with a category per exercise."""
    quiz = ET.Element("quiz")
    previous = None
    for item in version.items:
        path = category_path(version, item)
        if path != previous:
            category = ET.SubElement(quiz, "question", {"type": "category"})
            _text(category, "category", path, markdown=False)
            previous = path
        quiz.append(question_element(item))
    ET.indent(quiz)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(quiz, encoding="unicode") + "\n"
