"""`grader release`: the student copy of the course.

Shipped: the exercise stubs, the catalog without hidden checks, the grader package without the
instructor's code (INSTRUCTOR_CODE: its commands, the sandbox, the course lint, quiz authoring; the copy's `grader` then
has the student commands only) and without its secrets (of each exercise package, only the rank and judge
files its manifest.toml lists: not the `secret` ones, `hidden.py`, the hidden checks, and `answers.py`,
closed forms and reference values; see grader/checks/manifest.py) and with manifests that name what the copy
holds, a README and a pyproject written for students (the instructor's run commands and name extras the copy
cannot), and the practice pool: as rendered sheets and as one bank, `quizzes/practice.toml`, which
`grader quiz practice` asks from and answers with feedback. No expected value ships: where the closed forms
are a secret, a copy's public checks judge the laws the formulas obey (grader/checks/ex10_scaling/properties.py).
Not shipped: solutions/, tests/, docs/ (how to grade, the sandbox, the maintainers' notes: all the
instructor's), the secrets, and every exam-pool question with its answer: the instructor's banks never leave
the course, only the practice questions copied out of them.
"""

from __future__ import annotations

import importlib
import json
import shutil
import tomllib
from pathlib import Path

from grader.catalog import Catalog
from grader.checks.manifest import IMPLICIT, MANIFEST, Manifest, ManifestError, load_manifest
from grader.instructor.templating import render
from grader.judge.api import checks_in
from grader.paths import CATALOG, STUBS
from grader.quiz.bank import BankNotFound, load_banks
from grader.quiz.render import VERSION_FORMATS
from grader.quiz.versions import draw_all, select

# Of the grader package (relative to it), what only the instructor runs: left out of the copy, whose `grader`
# then registers the student commands only (grader/cli.py)
INSTRUCTOR_CODE = (
    "instructor",
    "course_lint.py",
    "course_lint_names.py",
    "course_lint_hints.py",
    "judge/causes.toml",  # the course's vocabulary of causes: read by the lint, never at grading
    "sandbox",
    "quiz/authoring.py",
    "quiz/lint.py",
    "quiz/cues.py",
    "quiz/duplicates.py",
    "quiz/render.py",
    "quiz/markdown.py",
    "quiz/export_gift.py",
    "quiz/export_moodle.py",
    "quiz/export_qti.py",
    "quiz/templates",
)
# what the copy's pyproject leaves out of the course's: the extras of the tests and the lint, which do not ship,
# and jinja2, which only the instructor's templates and quiz rendering use
INSTRUCTOR_EXTRAS = ("test", "lint", "similarity")  # similarity: `grader similarity`, an instructor command
INSTRUCTOR_DEPENDENCIES = ("jinja2",)
EDITION = "student"  # [tool.grader] edition in the copy's pyproject: what makes the release refuse to run there
STUDENT_GITIGNORE = "*.egg-info/\n.grader/\n.venv/\n__pycache__/\n.ipynb_checkpoints/\n"
SHEET_FORMATS = ("md", "html")
PRACTICE_BANK = "practice.toml"
PRACTICE_HEADER = """\
# The practice questions of this course, with their answers and explanations: they are here to
# give feedback. Ask them with `grader quiz practice`; list them with `grader quiz list`.
"""


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


def _manifests(grader_package: Path) -> dict[Path, Manifest]:
    """Each exercise package of the grader (relative to it) and its manifest; ReleaseError if one is wrong,
    since the manifests say which files ship."""
    try:
        return {
            init.parent.relative_to(grader_package): load_manifest(init.parent)
            for init in sorted(grader_package.glob("checks/*/__init__.py"))
        }
    except ManifestError as exc:
        raise ReleaseError(f"cannot tell the secret files from the shipped ones: {exc}") from exc


def _copy_grader(grader_package: Path, out: Path, manifests: dict[Path, Manifest]) -> None:
    """The grader package into `out`, without bytecode; of each exercise package only what its manifest ships
    (its rank and judge files): a secret, or a file no list names, stays behind."""
    shipped = {
        grader_package / package: {*IMPLICIT, *manifest.rank, *manifest.judge}
        for package, manifest in manifests.items()
    }

    instructor = {grader_package / path for path in INSTRUCTOR_CODE}

    def ignore(folder: str, names: list[str]) -> set[str]:
        kept = shipped.get(Path(folder))
        return {
            n
            for n in names
            if n == "__pycache__"
            or n.endswith(".pyc")
            or (kept is not None and n not in kept)
            or Path(folder, n) in instructor
        }

    shutil.copytree(grader_package, out, ignore=ignore)


def _student_manifests(package_out: Path, manifests: dict[Path, Manifest]) -> None:
    """The copy's manifests name what it holds: no secret."""
    for package, manifest in manifests.items():
        (package_out / package / MANIFEST).write_text(
            Manifest(manifest.rank, manifest.judge, ()).text(), encoding="utf-8"
        )


def _without_comments(lines: list[str]) -> str:
    """The lines less their full-line comments; a line inside a multi-line string is text, kept."""
    kept, inside = [], False
    for line in lines:
        if inside or not line.lstrip().startswith("#"):
            kept.append(line)
        if (line.count('"""') + line.count("'''")) % 2:
            inside = not inside
    return "".join(kept)


def practice_bank(texts: list[str]) -> str:
    """The practice questions of the bank files `texts`, as one bank file; exam questions and every
    comment (a comment may speak of the question next to it) are left out."""
    kept = []
    for text in texts:
        blocks: list[list[str]] = [[]]
        for line in text.splitlines(keepends=True):
            if line.strip() == "[[questions]]":
                blocks.append([])
            blocks[-1].append(line)
        for block in blocks[1:]:
            body = _without_comments(block)
            entries = tomllib.loads(body).get("questions", [])
            if entries != tomllib.loads("".join(block)).get("questions", []):
                raise ReleaseError(f"a practice bank question changed when its comments were left out:\n{body}")
            if len(entries) == 1 and entries[0].get("pool") == "practice":
                kept.append(body.strip() + "\n")
    return PRACTICE_HEADER + "".join(f"\n{block}" for block in kept)


def _practice_bank(catalog: Catalog, out: Path) -> Path | None:
    """The practice pool as a bank `grader quiz practice` can ask from; refused if an exam question got in."""
    sources = sorted((catalog.root / "quizzes").glob("*.toml"))
    if not sources:
        return None
    text = practice_bank([source.read_text(encoding="utf-8") for source in sources])
    pools = {entry.get("pool") for entry in tomllib.loads(text).get("questions", [])}
    if not pools:
        return None
    if pools != {"practice"}:
        raise ReleaseError(f"the practice bank would hold questions of the pools {sorted(map(str, pools))}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / PRACTICE_BANK
    path.write_text(text, encoding="utf-8")
    return path


def _student_pyproject(root: Path, out: Path) -> Path:
    """The copy's pyproject: the course's dependencies and the extras a student can use (notebooks, plots), no
    test, lint or similarity extra and no pytest settings (tests/ does not ship), and its edition marked."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dependencies = [d for d in project["dependencies"] if not d.startswith(INSTRUCTOR_DEPENDENCIES)]
    extras = {k: v for k, v in project.get("optional-dependencies", {}).items() if k not in INSTRUCTOR_EXTRAS}
    text = render(
        "student_pyproject.toml.j2",
        project=project,
        dependencies=dependencies,
        extras=extras,
        edition=EDITION,
        quote=json.dumps,  # a JSON string of plain text is a TOML basic string
    )
    path = out / "pyproject.toml"
    path.write_text(text, encoding="utf-8")
    return path


def is_student_copy(root: Path) -> bool:
    """Whether the course at `root` is a student copy (its pyproject says so): its stubs are a student's work."""
    try:
        pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return bool(pyproject.get("tool", {}).get("grader", {}).get("edition") == EDITION)


def _student_readme(catalog: Catalog, out: Path) -> Path:
    """The README of the copy: student commands only, and links only to what ships."""
    sheets = sorted(p.relative_to(out).as_posix() for p in (out / "quizzes").glob("practice-quiz.*"))
    text = render(
        "student_readme.md.j2",
        exercises=catalog.exercises,
        sheets=sheets,
        practice=(out / "quizzes" / PRACTICE_BANK).is_file(),
        stubs=STUBS,
    )
    path = out / "README.md"
    path.write_text(text, encoding="utf-8")
    return path


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
    if is_student_copy(catalog.root):
        raise ReleaseError(
            f"{catalog.root} is a student copy of the course (its exercises are a student's work, not the stubs): "
            "release from the instructor's course"
        )
    _refuse_leaks(catalog)
    manifests = _manifests(grader_package)
    root = catalog.root
    (out / STUBS).mkdir(parents=True)
    for exercise in catalog.exercises:
        shutil.copyfile(catalog.stub_path(exercise), out / STUBS / exercise.file)
    (out / CATALOG).write_text(public_catalog((root / CATALOG).read_text()))
    _copy_grader(grader_package, out / "grader", manifests)
    _student_manifests(out / "grader", manifests)
    _student_pyproject(root, out)
    (out / ".gitignore").write_text(STUDENT_GITIGNORE, encoding="utf-8")
    _quiz_sheets(catalog, out / "quizzes")
    _practice_bank(catalog, out / "quizzes")
    _student_readme(catalog, out)
    return sorted(out.iterdir())
