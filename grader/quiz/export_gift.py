"""Moodle GIFT export: one text file per version, categories from the exercise tags.

GIFT gives `~ = # { } :` a meaning, so they are escaped with a backslash (and the backslash
itself), and newlines become `\\n` because a blank line ends a question in GIFT. Two things GIFT
reads at the start of a choice cannot be escaped: a weight such as `%50%` and a format such as
`[html]`. Every choice and feedback therefore starts with an explicit `[markdown]`, after which
Moodle takes the rest literally.

GIFT has no field for a question's mark: Moodle imports every GIFT question at 1 mark. The file says
so at the top and before every question worth more, so whoever imports it can set those marks (or
use the Moodle XML export, which carries them).
"""

from __future__ import annotations

from grader.quiz.export_moodle import category_path, fraction
from grader.quiz.versions import Item, Version, exact_number, format_number

SPECIAL = "\\~=#{}:"
_ESCAPES = str.maketrans({char: f"\\{char}" for char in SPECIAL})
FORMAT = "[markdown]"


def escape(text: str) -> str:
    """Escape GIFT's special characters; newlines are written as the two characters \\n."""
    return text.strip().translate(_ESCAPES).replace("\r\n", "\n").replace("\n", "\\n")


def marked(text: str) -> str:
    """Text in an answer or feedback position, with its format stated so nothing in it is read as GIFT."""
    return FORMAT + escape(text)


def _answers(item: Item) -> str:
    question = item.question
    if question.type == "numeric":
        return f"#{item.value!r}:{item.tolerance!r}"
    if question.type == "truefalse":
        return "TRUE" if item.choices[0].correct else "FALSE"
    right = len(item.correct_letters)
    lines = []
    for choice in item.choices:
        if question.type == "single":
            mark = "=" if choice.correct else "~"
        else:
            mark = f"~%{fraction(right, negative=not choice.correct)}%"
        lines.append(f"\t{mark}{marked(choice.text)}#{marked(choice.explanation)}")
    return "\n" + "\n".join(lines) + "\n"


def points_note(item: Item) -> str:
    """The comment before a question GIFT would import at the wrong mark."""
    points = format_number(item.question.points)
    return (
        f"// q{item.number:02d} {item.question.id} is worth {points} points; GIFT cannot carry marks, so Moodle "
        f"imports it at 1: set its default mark to {points} after the import\n"
    )


def question_text(item: Item) -> str:
    """One GIFT question: title, Markdown text, answers and the explanation as general feedback."""
    title = escape(f"q{item.number:02d} {item.question.id}")
    feedback = f"####{marked(item.explanation)}" if item.explanation.strip() else ""
    note = points_note(item) if item.question.points != 1 else ""
    return f"{note}::{title}::{FORMAT}{escape(item.text)}{{{_answers(item)}{feedback}}}\n"


def render(version: Version) -> str:
    header = f"// {version.title}: version {version.number}\n"
    weighted = [item for item in version.items if item.question.points != 1]
    if weighted:
        listed = ", ".join(f"q{i.number:02d} {i.question.id} ({exact_number(i.question.points)})" for i in weighted)
        header += (
            "// GIFT has no field for marks: Moodle imports every question below at 1 mark. Set these default "
            f"marks by hand after the import, or import the Moodle XML file instead: {listed}\n"
        )
    blocks = [header]
    previous = None
    for item in version.items:
        path = category_path(version, item)
        if path != previous:
            blocks.append(f"$CATEGORY: {path}\n")
            previous = path
        blocks.append(question_text(item))
    return "\n".join(blocks)
