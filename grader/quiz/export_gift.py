"""Moodle GIFT export: one text file per version, categories from the exercise tags.

GIFT gives `~ = # { } :` a meaning, so they are escaped with a backslash (and the backslash
itself), and newlines become `\\n` because a blank line ends a question in GIFT.
"""

from __future__ import annotations

from grader.quiz.export_moodle import category_path, fraction
from grader.quiz.versions import Item, Version

SPECIAL = "\\~=#{}:"


def escape(text: str) -> str:
    """Escape GIFT's special characters; newlines are written as the two characters \\n."""
    escaped = "".join(f"\\{char}" if char in SPECIAL else char for char in text.strip())
    return escaped.replace("\r\n", "\n").replace("\n", "\\n")


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
        lines.append(f"\t{mark}{escape(choice.text)}#{escape(choice.explanation)}")
    return "\n" + "\n".join(lines) + "\n"


def question_text(item: Item) -> str:
    """One GIFT question: title, Markdown text, answers and the explanation as general feedback."""
    title = escape(f"q{item.number:02d} {item.question.id}")
    feedback = f"####{escape(item.explanation)}" if item.explanation.strip() else ""
    return f"::{title}::[markdown]{escape(item.text)}{{{_answers(item)}{feedback}}}\n"


def render(version: Version) -> str:
    blocks = [f"// {version.title}: version {version.number}, seed {version.seed}\n"]
    previous = None
    for item in version.items:
        path = category_path(version, item)
        if path != previous:
            blocks.append(f"$CATEGORY: {path}\n")
            previous = path
        blocks.append(question_text(item))
    return "\n".join(blocks)
