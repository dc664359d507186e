"""The HTML sheet opens in a real headless browser: it renders to a non-blank page and prints to PDF, every page
naming the version and its page number."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.cli import main

from . import pdf_text
from .support import COURSE_BANK

BROWSER = next(
    (found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))), None
)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium or chrome on PATH (apt-get install chromium)")


def headless(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the browser with a private profile so parallel tests never share state."""
    assert BROWSER is not None
    command = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
    ]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.fixture()
def sheet(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    assert (
        main(
            [
                "quiz",
                "render",
                "--bank",
                str(COURSE_BANK),
                "--format",
                "html",
                "--seed",
                "12",
                "--count",
                "8",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out / "quiz-v01.html"


def test_html_is_self_contained(sheet: Path) -> None:
    html = sheet.read_text()
    for reference in ("<link", "<script", "src=", "@import", "url("):
        assert reference not in html
    assert "@media print" in html and "break-inside: avoid" in html


def test_screenshot_of_the_sheet(sheet: Path, tmp_path: Path) -> None:
    shot = tmp_path / "sheet.png"
    result = headless(tmp_path, f"--screenshot={shot}", "--window-size=1000,1400", sheet.as_uri())
    assert shot.is_file(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000, "screenshot looks blank"
    if keep := os.environ.get("QUIZ_SCREENSHOT"):
        shutil.copy(shot, keep)


def test_print_to_pdf(sheet: Path, tmp_path: Path) -> None:
    pdf = tmp_path / "sheet.pdf"
    result = headless(tmp_path, f"--print-to-pdf={pdf}", "--no-pdf-header-footer", sheet.as_uri())
    assert pdf.is_file(), result.stderr[-2000:]
    assert pdf.read_bytes().startswith(b"%PDF")


def test_every_printed_page_names_the_version_and_its_page(tmp_path: Path) -> None:
    """A sheet of several pages, printed: each page carries the title, the version and "page i of n", so a
    page that comes loose is put back with its sheet (the Name line is on page 1 only)."""
    out = tmp_path / "out"
    assert (
        main(
            ["quiz", "render", "--bank", str(COURSE_BANK), "--format", "html", "--seed", "12"]
            + ["--count", "12", "--versions", "2", "--out", str(out)]
        )
        == 0
    )
    pdf = tmp_path / "sheet.pdf"
    result = headless(tmp_path, f"--print-to-pdf={pdf}", "--no-pdf-header-footer", (out / "quiz-v02.html").as_uri())
    assert pdf.is_file(), result.stderr[-2000:]
    printed = [re.sub(r"\s+", "", text) for text in pdf_text.pages(pdf)]
    assert len(printed) >= 2, "the sheet should fill more than one page"
    for number, text in enumerate(printed, 1):
        assert "Distributedtrainingquiz" in text and f"Version2,page{number}of{len(printed)}" in text, text[:200]
