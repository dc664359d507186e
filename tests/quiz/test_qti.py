"""The Canvas export: one IMS QTI 1.2 zip per version, checked element by element against the parts of
the QTI 1.2 ASI structure that Canvas's importer reads (questestinterop, assessment, section, item,
itemmetadata, presentation, resprocessing, itemfeedback), and against the version's key."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from grader.cli import main
from grader.quiz import export_qti
from grader.quiz.markdown import to_html
from grader.quiz.versions import Item, Version, draw_all

from .support import COURSE_BANK, attribute, child_text, course_questions, find_child

QTI = "{http://www.imsglobal.org/xsd/ims_qtiasiv1p2}"
CP = "{http://www.imsglobal.org/xsd/imsccv1p1/imscp_v1p1}"
CANVAS = "{http://canvas.instructure.com/xsd/cccv1p0}"
# Children allowed (in this order) by the QTI 1.2 ASI schema for the elements the export writes.
CHILDREN = {
    "questestinterop": ["assessment"],
    "assessment": ["qtimetadata", "section"],
    "section": ["item"],
    "item": ["itemmetadata", "presentation", "resprocessing", "itemfeedback"],
    "itemmetadata": ["qtimetadata"],
    "qtimetadata": ["qtimetadatafield"],
    "qtimetadatafield": ["fieldlabel", "fieldentry"],
    "presentation": ["material", "response_lid", "response_str"],
    "material": ["mattext"],
    "response_lid": ["render_choice"],
    "response_str": ["render_fib"],
    "render_choice": ["response_label"],
    "render_fib": ["response_label"],
    "response_label": ["material"],
    "resprocessing": ["outcomes", "respcondition"],
    "outcomes": ["decvar"],
    "respcondition": ["conditionvar", "setvar", "displayfeedback"],
    "conditionvar": ["varequal", "vargte", "varlte", "and", "or", "not", "other"],
    "and": ["varequal", "vargte", "varlte", "not"],
    "or": ["varequal", "and"],
    "not": ["varequal"],
    "itemfeedback": ["flow_mat"],
    "flow_mat": ["material"],
}
# Elements whose content model is a sequence (the others are choices, in any order).
ORDERED = {"assessment", "item", "qtimetadatafield", "resprocessing", "respcondition"}
CANVAS_TYPES = {
    "single": "multiple_choice_question",
    "multiple": "multiple_answers_question",
    "truefalse": "true_false_question",
    "numeric": "numerical_question",
}


def local(element: ET.Element) -> str:
    assert element.tag.startswith(QTI), f"{element.tag} is outside the QTI namespace"
    return element.tag[len(QTI) :]


def check_structure(element: ET.Element) -> None:
    """Every child is allowed under its parent, and children of a sequence keep the schema's order."""
    name = local(element)
    allowed = CHILDREN.get(name, [])
    positions = []
    for child in element:
        child_name = local(child)
        assert child_name in allowed, f"<{child_name}> inside <{name}>"
        positions.append(allowed.index(child_name))
        check_structure(child)
    if name in ORDERED:
        assert positions == sorted(positions), f"children of <{name}> out of order"


def package(version: Version) -> tuple[ET.Element, ET.Element, ET.Element, zipfile.ZipFile]:
    archive = zipfile.ZipFile(io.BytesIO(export_qti.render(version)))
    manifest = ET.fromstring(archive.read("imsmanifest.xml"))
    resources = {attribute(r, "identifier"): r for r in manifest.iter(f"{CP}resource")}
    (quiz,) = [r for r in resources.values() if r.get("type") == "imsqti_xmlv1p2"]
    (dependency,) = quiz.findall(f"{CP}dependency")
    meta = resources[attribute(dependency, "identifierref")]
    files = [attribute(f, "href") for r in resources.values() for f in r.findall(f"{CP}file")]
    assert sorted(files) == sorted(n for n in archive.namelist() if n != "imsmanifest.xml")
    assessment = ET.fromstring(archive.read(attribute(find_child(quiz, f"{CP}file"), "href")))
    settings = ET.fromstring(archive.read(attribute(find_child(meta, f"{CP}file"), "href")))
    return manifest, assessment, settings, archive


def fields(item: ET.Element) -> dict[str, str]:
    return {
        child_text(f, f"{QTI}fieldlabel"): child_text(f, f"{QTI}fieldentry")
        for f in item.iter(f"{QTI}qtimetadatafield")
    }


def scoring_condition(element: ET.Element) -> ET.Element:
    (condition,) = [c for c in element.iter(f"{QTI}respcondition") if c.find(f"{QTI}setvar") is not None]
    setvar = find_child(condition, f"{QTI}setvar")
    assert (setvar.get("action"), setvar.get("varname"), setvar.text) == ("Set", "SCORE", "100")
    assert condition.get("continue") == "No"
    return find_child(condition, f"{QTI}conditionvar")


def check_item(element: ET.Element, item: Item) -> None:
    meta = fields(element)
    assert meta["question_type"] == CANVAS_TYPES[item.question.type]
    assert float(meta["points_possible"]) == item.question.points
    presentation = find_child(element, f"{QTI}presentation")
    assert presentation.findtext(f"{QTI}material/{QTI}mattext") == str(to_html(item.text))
    assert find_child(presentation, f"{QTI}material/{QTI}mattext").get("texttype") == "text/html"
    condition = scoring_condition(element)
    if item.value is not None:
        fib = find_child(presentation, f"{QTI}response_str/{QTI}render_fib")
        assert fib.get("fibtype") == "Decimal"
        either = find_child(condition, f"{QTI}or")
        assert float(child_text(either, f"{QTI}varequal")) == pytest.approx(item.value, rel=1e-11)
        low = float(child_text(either, f"{QTI}and/{QTI}vargte"))
        high = float(child_text(either, f"{QTI}and/{QTI}varlte"))
        assert low == pytest.approx(item.value - item.tolerance) and high == pytest.approx(item.value + item.tolerance)
        return
    lid = find_child(presentation, f"{QTI}response_lid")
    assert lid.get("rcardinality") == ("Multiple" if item.question.type == "multiple" else "Single")
    labels = lid.findall(f"{QTI}render_choice/{QTI}response_label")
    assert [lab.findtext(f"{QTI}material/{QTI}mattext") for lab in labels] == [
        str(to_html(c.text)) for c in item.choices
    ]
    idents = [attribute(lab, "ident") for lab in labels]
    assert meta["original_answer_ids"] == ",".join(idents)
    right = {ident for ident, choice in zip(idents, item.choices) if choice.correct}
    if item.question.type == "multiple":
        every = find_child(condition, f"{QTI}and")
        assert {v.text for v in every.findall(f"{QTI}varequal")} == right
        assert {v.text for v in every.findall(f"{QTI}not/{QTI}varequal")} == set(idents) - right
    else:
        assert {v.text for v in condition.findall(f"{QTI}varequal")} == right
    feedback = {f.get("ident") for f in element.findall(f"{QTI}itemfeedback")}
    shown = {d.get("linkrefid") for d in element.iter(f"{QTI}displayfeedback")}
    assert shown <= feedback and shown, "every displayed feedback exists"


@pytest.fixture(scope="module")
def versions() -> list[Version]:
    return draw_all(course_questions(), seed=12, versions=3)


def test_every_version_is_a_qti_package_canvas_reads(versions: list[Version]) -> None:
    seen: set[str] = set()
    for version in versions:
        _, assessment, settings, _ = package(version)
        assert local(assessment) == "questestinterop"
        check_structure(assessment)
        items = assessment.findall(f"{QTI}assessment/{QTI}section/{QTI}item")
        assert len(items) == len(version.items)
        for element, item in zip(items, version.items):
            check_item(element, item)
        idents = {ident for e in assessment.iter() if (ident := e.get("ident"))} - {
            "root_section",
            "general_fb",
            "response1",
            "answer1",
        }
        assert not idents & seen, "versions must not share identifiers: Canvas would merge them"
        seen |= idents
        assert settings.tag == f"{CANVAS}quiz"
        points = float(child_text(settings, f"{CANVAS}points_possible"))
        assert points == sum(i.question.points for i in version.items)
        assert settings.findtext(f"{CANVAS}shuffle_answers") == "false", "the key's letters must stay"


def test_qti_text_is_escaped_html(versions: list[Version]) -> None:
    archive = zipfile.ZipFile(io.BytesIO(export_qti.render(versions[0])))
    raw = b"".join(archive.read(name) for name in archive.namelist()).decode()
    assert "<p>" not in raw and "&lt;p&gt;" in raw, "HTML travels as escaped text inside <mattext>"


def test_render_writes_one_package_per_version(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert (
        main(
            [
                "quiz",
                "render",
                "--bank",
                str(COURSE_BANK),
                "--format",
                "qti",
                "--versions",
                "3",
                "--seed",
                "2",
                "--count",
                "10",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    packages = sorted(p.name for p in out.glob("*.qti.zip"))
    assert packages == ["v01.qti.zip", "v02.qti.zip", "v03.qti.zip"]
    for name in packages:
        assert "imsmanifest.xml" in zipfile.ZipFile(out / name).namelist()
