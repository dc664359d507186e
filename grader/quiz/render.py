"""Render drawn versions to sheets (Markdown, HTML, notebook) and LMS files, plus their keys.

A per-version format is a function Version -> text or bytes, registered in VERSION_FORMATS with its
file name; a whole-render format (the Moodle variant pools) is a function of all the versions,
registered in RENDER_FORMATS. `write_versions` writes every version's files and its two keys (JSON
for `grade`, Markdown for people), into a folder that is empty, or, with `force`, whose earlier
render outputs it removes first, so stale keys of another seed never sit beside new ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import jinja2
import nbformat
from markupsafe import Markup
from nbformat import v4

from grader.quiz import export_gift, export_moodle, export_qti
from grader.quiz.key import answer_text, key_data
from grader.quiz.markdown import to_html
from grader.quiz.versions import Item, Version, format_number

TEMPLATES = Path(__file__).with_name("templates")
KIND_LABELS = {
    "single": "Single choice",
    "multiple": "Multiple choice",
    "numeric": "Numeric",
    "truefalse": "True or false",
}


def kind_label(item: Item) -> str:
    return KIND_LABELS[item.question.type]


def points(item: Item) -> str:
    value = item.question.points
    return f"{format_number(value)} point{'' if value == 1 else 's'}"


_CSS_PLAIN = re.compile(r"[A-Za-z0-9 .,:;!?()'_-]")


def css_string(text: str) -> Markup:
    """`text` as a quoted CSS string that stays one: every other character as a hex escape, so a title
    holding a quote, a backslash or `</style>` ends neither the string nor the style sheet."""
    escaped = "".join(char if _CSS_PLAIN.fullmatch(char) else f"\\{ord(char):x} " for char in text)
    return Markup(f'"{escaped}"')


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """One jinja2 environment for all templates; HTML templates autoescape, Markdown ones do not."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(["html.j2"]),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.globals.update(kind_label=kind_label, points=points, answer_text=answer_text, number=format_number)
    env.filters["markdown"] = to_html
    env.filters["css_string"] = css_string
    return env


@lru_cache(maxsize=1)
def print_css() -> str:
    return (TEMPLATES / "print.css").read_text(encoding="utf-8")


def render_markdown(version: Version) -> str:
    return environment().get_template("quiz.md.j2").render(version=version)


def render_html(version: Version) -> str:
    """A self-contained page: the print CSS is inlined and nothing is loaded from elsewhere."""
    return environment().get_template("quiz.html.j2").render(version=version, css=print_css())


def _cell(kind: str, source: str, cell_id: str) -> nbformat.NotebookNode:
    """A v4 cell. Built as a plain node because nbformat's `new_*_cell` validate every cell against
    the schema, which dominated rendering time; `nbformat.writes` validates the whole notebook once."""
    cell: dict[str, object] = {"cell_type": kind, "id": cell_id, "metadata": {}, "source": source}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return nbformat.from_dict(cell)


def render_notebook(version: Version) -> str:
    """A notebook with one Markdown cell per question and an answer cell after it.

    Cell ids are set from the question number: nbformat would otherwise draw random ids and the
    same seed would not give the same bytes.
    """
    # the template's macro: jinja2 types a template's module without its names
    question = environment().get_template("question.md.j2").module.question  # type: ignore[attr-defined]
    cells = [
        _cell(
            "markdown",
            f"# {version.title}: version {version.number}\n\nWrite each answer in the cell below its question.",
            "title",
        ),
        _cell("code", "answers = {}", "answers"),
    ]
    for item in version.items:
        hint = '"A"' if item.question.type in ("single", "truefalse") else '"A;C"' if item.choices else "0.0"
        cells.append(_cell("markdown", str(question(item)).strip(), f"q{item.number}"))
        cells.append(_cell("code", f'answers["{item.question.id}"] = None  # e.g. {hint}', f"a{item.number}"))
    notebook = v4.new_notebook(cells=cells, metadata={"quiz": {"title": version.title, "version": version.number}})
    return nbformat.writes(notebook)


def render_key_markdown(version: Version) -> str:
    return environment().get_template("key.md.j2").render(version=version)


def render_key_json(version: Version) -> str:
    return json.dumps(key_data(version), indent=2, ensure_ascii=False) + "\n"


# name -> (file name, with {stem} for vNN, and the renderer of one version)
VERSION_FORMATS: dict[str, tuple[str, Callable[[Version], str | bytes]]] = {
    "md": ("quiz-{stem}.md", render_markdown),
    "html": ("quiz-{stem}.html", render_html),
    "ipynb": ("quiz-{stem}.ipynb", render_notebook),
    "gift": ("quiz-{stem}.gift.txt", export_gift.render),
    "moodle-xml": ("quiz-{stem}.moodle.xml", export_moodle.render),
    "qti": ("{stem}.qti.zip", export_qti.render),
}
# name -> (file name, renderer of all the versions together)
RENDER_FORMATS: dict[str, tuple[str, Callable[[Sequence[Version]], str]]] = {
    "moodle-pools": ("quiz-pools.moodle.xml", export_moodle.render_pools),
}
FORMATS = (*VERSION_FORMATS, *RENDER_FORMATS)
KEYS: dict[str, tuple[str, Callable[[Version], str]]] = {
    "key.json": ("{stem}.key.json", render_key_json),
    "key.md": ("{stem}.key.md", render_key_markdown),
}
# Every file a render writes, whatever its formats: what `force` clears before writing anew.
OUTPUT_NAME = re.compile(
    "^(?:"
    + "|".join(
        re.escape(name).replace(re.escape("{stem}"), r"v\d+")
        for name, _ in (*VERSION_FORMATS.values(), *RENDER_FORMATS.values(), *KEYS.values())
    )
    + ")$"
)


class OutputFolderError(Exception):
    """The output folder holds files already, and the render was not told to replace them."""


def version_stem(number: int, total: int) -> str:
    return f"v{number:0{max(2, len(str(total)))}d}"


def prepare_folder(out: Path, force: bool) -> None:
    """Refuse a folder with anything in it, unless `force`: then remove the outputs of earlier renders
    (other files stay, and are named in the error when they are all that is left)."""
    if out.exists() and not out.is_dir():
        raise OutputFolderError(f"{out} is a file, not a folder")
    if not out.exists() or not any(out.iterdir()):
        return
    if not force:
        raise OutputFolderError(
            f"{out} is not empty: its keys would mix with this render's; use a new folder, "
            "or --force to replace the earlier render"
        )
    for path in out.iterdir():
        if path.is_file() and OUTPUT_NAME.match(path.name):
            path.unlink()


def write_versions(versions: Sequence[Version], formats: Sequence[str], out: Path, force: bool = False) -> list[Path]:
    """Write each format's files and `vNN.key.json` / `vNN.key.md` for each version."""
    prepare_folder(out, force)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def write(filename: str, data: str | bytes) -> None:
        path = out / filename
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8", newline="\n")
        written.append(path)

    renderers = [VERSION_FORMATS[name] for name in formats if name in VERSION_FORMATS] + list(KEYS.values())
    for version in versions:
        stem = version_stem(version.number, len(versions))
        for filename, render in renderers:
            write(filename.format(stem=stem), render(version))
    for name in formats:
        if name in RENDER_FORMATS:
            filename, render_all = RENDER_FORMATS[name]
            write(filename, render_all(versions))
    return written
