"""`grader release`: the student copy of the course.

Shipped: the exercise stubs, the catalog without hidden checks, the grader package without its
secrets (`hidden.py`, the hidden checks, and `answers.py`, closed forms and reference values: see
grader/checks/__init__.py), the README, pyproject and docs meant for students (not the instructors'
nor the maintainers' notes), and the quizzes as
rendered practice sheets. Where an exercise's public checks need the answers, the release writes
their values on the public checks' own inputs (`expected.json`), never the formulas.
Not shipped: solutions/, tests/, the secrets, and the question banks themselves: a bank holds the
correct answers and their explanations, so students get the sheet and never the key.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import tomllib
from pathlib import Path

from grader.catalog import Catalog
from grader.checks import SECRET_MODULES
from grader.judge.api import checks_in
from grader.paths import CATALOG, STUBS
from grader.quiz.bank import BankNotFound, load_banks
from grader.quiz.render import VERSION_FORMATS
from grader.quiz.versions import draw_all, select

TOP_LEVEL_FILES = ("README.md", "pyproject.toml", ".gitignore")
# how to grade, how to write banks, and the maintainers' notes (design, the diagnoses' signatures): not for students
INSTRUCTOR_DOCS = ("INSTRUCTORS.md", "QUIZZES.md", "maintainers")
SHEET_FORMATS = ("md", "html")


class ReleaseError(Exception):
    """The course cannot be released safely; the message says what to fix."""


def _blocks(text: str) -> list[str]:
    """The catalog split at its table headers, each block keeping its own lines and comments."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines(keepends=True):
        if line.startswith("["):
            blocks.append([])
        blocks[-1].append(line)
    return ["".join(block) for block in blocks if block]


def public_catalog(text: str) -> str:
    """The catalog's text without its hidden `[[exercise.check]]` entries, comments kept."""
    kept = []
    for block in _blocks(text):
        if block.startswith("[[exercise.check]]"):
            entry = tomllib.loads(block.replace("[[exercise.check]]", "", 1))
            if entry.get("visibility", "public") == "hidden":
                continue
        kept.append(block)
    return "".join(kept)


def _refuse_leaks(catalog: Catalog) -> None:
    """A hidden check whose code sits in checks.py would ship with it: refuse, saying where to move it."""
    for exercise in catalog.exercises:
        shipped = checks_in(importlib.import_module(f"{exercise.checks_package}.checks").__name__)
        for spec in exercise.checks:
            if spec.visibility == "hidden" and spec.name in shipped:
                raise ReleaseError(
                    f"hidden check {spec.name!r} of {exercise.id} is defined in {exercise.checks_package}.checks, "
                    "which students receive: move it to hidden.py in the same package"
                )


def _ignore(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n in ("__pycache__", *SECRET_MODULES) or n.endswith(".pyc")}


def _public_tables(catalog: Catalog, package_out: Path) -> None:
    """For each exercise whose answers are a secret, their values on the public inputs only."""
    for exercise in catalog.exercises:
        answers = f"{exercise.checks_package}.answers"
        if importlib.util.find_spec(answers) is None:
            continue
        table = importlib.import_module(answers).public_table()
        folder = package_out.joinpath(*exercise.checks_package.split(".")[1:])
        (folder / "expected.json").write_text(json.dumps(table))


def _quiz_sheets(catalog: Catalog, out: Path) -> list[Path]:
    """The practice pool as one rendered sheet per format; exam questions never leave the course."""
    try:
        bank = load_banks(catalog.root / "quizzes", [exercise.id for exercise in catalog.exercises])
    except BankNotFound:
        return []
    questions = select(bank.questions, seed=0, pool="practice")
    if not questions:
        return []
    version = draw_all(questions, seed=0, versions=1, title="Practice quiz", pool="practice")[0]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in SHEET_FORMATS:
        filename, render = VERSION_FORMATS[name]
        path = out / f"practice-quiz.{filename.split('{stem}.', 1)[1]}"
        text = render(version)
        assert isinstance(text, str), f"{name} is not a text sheet"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def release(catalog: Catalog, out: Path, grader_package: Path) -> list[Path]:
    """Write the student copy into `out` (new or empty); returns the top-level paths written."""
    if out.exists() and any(out.iterdir()):
        raise ReleaseError(f"{out} is not empty: release into a new directory")
    if out.resolve().is_relative_to(catalog.root.resolve()):
        raise ReleaseError(f"{out} is inside the course itself: release outside it")
    _refuse_leaks(catalog)
    root = catalog.root
    (out / STUBS).mkdir(parents=True)
    for exercise in catalog.exercises:
        shutil.copyfile(catalog.stub_path(exercise), out / STUBS / exercise.file)
    (out / CATALOG).write_text(public_catalog((root / CATALOG).read_text()))
    shutil.copytree(grader_package, out / "grader", ignore=_ignore)
    _public_tables(catalog, out / "grader")
    for name in TOP_LEVEL_FILES:
        if (root / name).is_file():
            shutil.copyfile(root / name, out / name)
    if (root / "docs").is_dir():
        docs = root / "docs"

        def not_for_students(folder: str, names: list[str]) -> set[str]:
            return set(INSTRUCTOR_DOCS) & set(names) if Path(folder) == docs else set()

        shutil.copytree(docs, out / "docs", ignore=not_for_students)
    _quiz_sheets(catalog, out / "quizzes")
    return sorted(out.iterdir())
