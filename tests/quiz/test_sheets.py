"""What students are handed: no seed on any sheet or LMS file (only the keys keep it), and a title that stays
text in the printed page's header."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from grader.cli import main
from grader.quiz.render import css_string

from .support import GRADING_BANK, write_bank

SEED = 7_654_321  # digits no sheet would hold by chance


def render(tmp_path: Path, *extra: str) -> Path:
    write_bank(tmp_path / "bank", GRADING_BANK)
    out = tmp_path / "out"
    argv = ["quiz", "render", "--bank", str(tmp_path / "bank"), "--pool", "all", "--versions", "2"]
    assert main([*argv, "--seed", str(SEED), "--out", str(out), *extra]) == 0
    return out


def test_no_file_a_student_or_an_lms_sees_holds_the_seed(tmp_path: Path) -> None:
    """The seed and the bank give every version's key: sheets, notebooks and LMS imports (GIFT, Moodle XML,
    the variant pools, QTI with its quiz description) leave it out; the keys, the instructor's, keep it."""
    out = render(tmp_path, "--format", "all")
    shown = [path for path in out.iterdir() if ".key." not in path.name]
    assert {path.suffix for path in shown} == {".md", ".html", ".ipynb", ".txt", ".xml", ".zip"}
    for path in shown:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as archive:
                texts = [archive.read(name).decode() for name in archive.namelist()]
            assert any("<description>Version " in text for text in texts), "the quiz description is still there"
        else:
            texts = [path.read_text(encoding="utf-8")]
        assert all(str(SEED) not in text for text in texts), path.name
        assert all("seed" not in text.lower() for text in texts if path.suffix in (".md", ".html", ".ipynb"))
    assert json.loads((out / "v01.key.json").read_text())["seed"] == SEED
    assert f"Seed {SEED}" in (out / "v02.key.md").read_text()


def test_a_title_stays_text_in_the_printed_header(tmp_path: Path) -> None:
    """The page header is CSS content: a quote, a backslash or `</style>` in the title ends neither the CSS
    string nor the style sheet."""
    out = render(tmp_path, "--format", "html", "--title", 'Quiz "1" \\ </style><script>alert(1)</script>')
    html = (out / "quiz-v01.html").read_text()
    assert html.count("</style>") == 1 and "<script" not in html
    assert css_string('a"b\\c</style>') == '"a\\22 b\\5c c\\3c \\2f style\\3e "'
    assert "@top-right" in html and 'counter(page) " of " counter(pages)' in html
