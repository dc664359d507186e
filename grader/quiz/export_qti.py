"""Canvas export: one IMS QTI 1.2 package (a zip) per version, laid out the way Canvas imports it.

The package holds `imsmanifest.xml` (an IMS content package naming the assessment), the assessment
itself (`<questestinterop>`, one `<item>` per question with Canvas's `question_type` and
`points_possible` in its metadata, a `<presentation>`, a `<resprocessing>` that sets SCORE to 100 for
the right response, and `<itemfeedback>` for the explanations) and Canvas's `assessment_meta.xml`
with the quiz settings. The three files are jinja2 templates in templates/qti/ with every value
escaped; question texts are HTML made from the bank's Markdown, carried as escaped text in
`<mattext texttype="text/html">` as QTI 1.2 wants.

Every identifier carries the render's fingerprint and the version number: Canvas matches imported
objects by identifier, so two versions (or two renders) must never share one. The zip entries have
a fixed date, so the same seed gives the same bytes.
"""

from __future__ import annotations

import io
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from grader.quiz.key import fingerprint
from grader.quiz.markdown import to_html
from grader.quiz.versions import Item, Version, exact_number, format_number

TEMPLATES = Path(__file__).with_name("templates") / "qti"
QUESTION_TYPES = {
    "single": "multiple_choice_question",
    "multiple": "multiple_answers_question",
    "truefalse": "true_false_question",
    "numeric": "numerical_question",
}
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def _html(markdown_text: str) -> str:
    """HTML as plain text, so the template escapes it into the XML (a Markup would go in raw)."""
    return str(to_html(markdown_text)) if markdown_text.strip() else ""


def item_data(item: Item, ident: str) -> dict[str, Any]:
    """What the template needs to lay out one question."""
    question = item.question
    choices: list[dict[str, Any]] = [
        {"ident": f"{ident}_{c.letter}", "html": _html(c.text), "correct": c.correct, "feedback": _html(c.explanation)}
        for c in item.choices
    ]
    numeric = None
    if item.value is not None:
        numeric = {
            "exact": exact_number(item.value),
            "low": repr(item.value - item.tolerance),
            "high": repr(item.value + item.tolerance),
        }
    return {
        "ident": ident,
        "title": f"q{item.number:02d} {question.id}",
        "question_type": QUESTION_TYPES[question.type],
        "points": format_number(question.points),
        "answer_ids": ",".join(c["ident"] for c in choices) if choices else f"{ident}_answer",
        "html": _html(item.text),
        "choices": choices,
        "numeric": numeric,
        "cardinality": "Multiple" if question.type == "multiple" else "Single",
        "feedback": _html(item.explanation),
    }


def identifier(version: Version) -> str:
    return f"gq_{fingerprint(version)}_v{version.number:02d}"


def files(version: Version) -> dict[str, str]:
    """The package's files by path: imsmanifest.xml, <ident>/<ident>.xml, <ident>/assessment_meta.xml."""
    ident = identifier(version)
    title = f"{version.title}: version {version.number}"
    env = environment()
    items = [item_data(item, f"{ident}_q{item.number:02d}") for item in version.items]
    points = format_number(sum(item.question.points for item in version.items))
    return {
        "imsmanifest.xml": env.get_template("imsmanifest.xml.j2").render(ident=ident),
        f"{ident}/{ident}.xml": env.get_template("assessment.xml.j2").render(ident=ident, title=title, items=items),
        f"{ident}/assessment_meta.xml": env.get_template("assessment_meta.xml.j2").render(
            ident=ident, title=title, points=points, description=f"Version {version.number}."
        ),
    }


def render(version: Version) -> bytes:
    """The zip of one version."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, text in files(version).items():
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, text.encode("utf-8"))
    return buffer.getvalue()
