"""Symbolic links and special files in what is handed in are refused, never followed (docs/SECURITY.md):
a link to the solution scores nothing, a link to /etc/passwd shows nothing of it, a FIFO hangs
nothing. And a real batch of such submissions, with deeply nested files and notebooks among them
and honest submissions before and after, gives every submission its row (issue 19)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from instructor import support

from grader import intake
from grader.catalog import load_catalog
from grader.instructor.submissions import prepare
from grader.intake import SubmissionError

CATALOG = load_catalog(support.REPO)
EX01 = "ex01_process_group"
EX01_PY = f"{EX01}.py"
PASSWD = "root:x:0:0"
REFUSED = "is a symbolic link: submissions hold regular files only"


def _refused(path: Path, workdir: Path) -> str:
    with pytest.raises(SubmissionError) as refusal:
        prepare(path, CATALOG, workdir)
    return str(refusal.value)


def _honest(folder: Path) -> Path:
    folder.mkdir()
    shutil.copyfile(support.SOLUTIONS / EX01_PY, folder / EX01_PY)
    return folder


@pytest.mark.parametrize("target", [support.SOLUTIONS / EX01_PY, Path("/etc/passwd"), Path("/nonexistent")])
def test_an_exercise_file_that_is_a_link_refuses_the_submission(tmp_path: Path, target: Path) -> None:
    folder = tmp_path / "mallory"
    folder.mkdir()
    (folder / EX01_PY).symlink_to(target)
    assert _refused(folder, tmp_path / "work") == f"{EX01_PY} {REFUSED}"
    assert not (tmp_path / "work" / "files" / EX01_PY).exists()


@pytest.mark.parametrize("where", ["data/deep/er/link.txt", "folder_link", f"notes/{EX01}.ipynb"])
def test_a_link_at_any_depth_refuses_the_submission(tmp_path: Path, where: str) -> None:
    folder = _honest(tmp_path / "mallory")
    (folder / where).parent.mkdir(parents=True, exist_ok=True)
    (folder / where).symlink_to("/etc")
    assert _refused(folder, tmp_path / "work") == f"{where} {REFUSED}"


def test_a_notebook_that_is_a_link_refuses_the_submission(tmp_path: Path) -> None:
    folder = _honest(tmp_path / "mallory")
    notebook = support.notebook(tmp_path / "elsewhere.ipynb", CATALOG, "ex02_data_sharding")
    (folder / "ex02_data_sharding.ipynb").symlink_to(notebook)
    assert _refused(folder, tmp_path / "work") == f"ex02_data_sharding.ipynb {REFUSED}"


@pytest.mark.parametrize("kind", ["folder", "zip", "notebook"])
def test_a_submission_that_is_a_link_is_refused(tmp_path: Path, kind: str) -> None:
    real = {
        "folder": lambda: _honest(tmp_path / "real"),
        "zip": lambda: Path(shutil.make_archive(str(tmp_path / "real"), "zip", _honest(tmp_path / "src"))),
        "notebook": lambda: support.notebook(tmp_path / "real.ipynb", CATALOG, EX01),
    }[kind]()
    link = tmp_path / ("alice" + real.suffix)
    link.symlink_to(real)
    assert _refused(link, tmp_path / "work") == (
        f"{link.name} is a symbolic link: hand in the folder, zip or notebook itself"
    )


def test_special_files_refuse_the_submission(tmp_path: Path) -> None:
    fifo = _honest(tmp_path / "fifo")
    os.mkfifo(fifo / "pipe")
    assert _refused(fifo, tmp_path / "w1") == "pipe is a named pipe (FIFO): submissions hold regular files only"
    sock = _honest(tmp_path / "sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(sock / "s"))
        assert _refused(sock, tmp_path / "w2") == "s is a socket: submissions hold regular files only"
    os.mkfifo(tmp_path / "bob.zip")
    assert _refused(tmp_path / "bob.zip", tmp_path / "w3") == (
        "bob.zip is a named pipe (FIFO): submissions hold regular files only"
    )


def test_a_fifo_named_like_a_notebook_hangs_nothing(tmp_path: Path) -> None:
    folder = _honest(tmp_path / "mallory")
    os.mkfifo(folder / f"{EX01}.ipynb")
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            prepare(folder, CATALOG, tmp_path / "work")
            outcome.append(None)
        except SubmissionError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=attempt, daemon=True)  # opening a FIFO blocks until a writer comes
    reader.start()
    reader.join(timeout=20)
    assert outcome and str(outcome[0]) == f"{EX01}.ipynb is a named pipe (FIFO): submissions hold regular files only"


def test_a_link_swapped_in_after_the_check_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder is listed, then its files are copied: a file turned into a link in between (a
    submission grading beside it, without a sandbox, can write there) is still refused, not read."""
    folder = _honest(tmp_path / "mallory")
    copy = intake._copy_regular

    def swapped_first(*args: Any, **kwargs: Any) -> int:
        (folder / EX01_PY).unlink()
        (folder / EX01_PY).symlink_to("/etc/passwd")
        return copy(*args, **kwargs)

    monkeypatch.setattr(intake, "_copy_regular", swapped_first)
    assert _refused(folder, tmp_path / "work") == f"{EX01_PY} {REFUSED}"
    assert PASSWD not in "".join(p.read_text() for p in (tmp_path / "work").rglob("*") if p.is_file())


def test_a_folder_swapped_for_a_link_after_the_listing_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder inside is listed, then entered: made a link to the solutions in between, it is refused,
    whatever depth it sits at, and nothing behind the link is read."""
    folder = tmp_path / "mallory"
    (folder / "deep" / "er").mkdir(parents=True)
    shutil.copyfile(support.SOLUTIONS / EX01_PY, folder / "deep" / "er" / EX01_PY)
    enter = intake._Folder._open

    def swapped(self: intake._Folder, parts: Sequence[str]) -> int:
        if tuple(parts) == ("deep", "er"):
            shutil.rmtree(folder / "deep" / "er")
            (folder / "deep" / "er").symlink_to(support.SOLUTIONS)
        return enter(self, parts)

    monkeypatch.setattr(intake._Folder, "_open", swapped)
    assert _refused(folder, tmp_path / "work") == f"deep/er {REFUSED}"
    assert not [p for p in (tmp_path / "work").rglob("*.py")]


def test_a_zip_of_a_link_is_refused_and_an_honest_zip_is_not(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / EX01_PY).symlink_to(support.SOLUTIONS / EX01_PY)
    archive = tmp_path / "mallory.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.write(folder / EX01_PY, EX01_PY)  # follows the link: the member is the solution itself, as a file
        info = zipfile.ZipInfo("link.py")
        info.external_attr = (0o120777) << 16
        out.writestr(info, str(support.SOLUTIONS / EX01_PY))
    assert _refused(archive, tmp_path / "work") == f"mallory.zip: member 'link.py' {REFUSED}"
    honest = Path(shutil.make_archive(str(tmp_path / "alice"), "zip", _honest(tmp_path / "alice_src")))
    assert [p.name for p in prepare(honest, CATALOG, tmp_path / "w2").folder.iterdir()] == [EX01_PY]


# --- a real batch ---------------------------------------------------------------------------------


def _hostile_class(folder: Path, course: Path) -> dict[str, str]:
    """Honest submissions first and last, hostile ones between: submission -> what its row must say."""
    folder.mkdir()
    _honest(folder / "a_honest_first")
    deep_py = folder / "deep_py"
    deep_py.mkdir()
    (deep_py / EX01_PY).write_text((support.SOLUTIONS / EX01_PY).read_text() + "\nx = " + "-" * 100_000 + "1\n")
    (folder / "deep_notebook.ipynb").write_text("[" * 100_000 + "]" * 100_000)
    deep_in_folder = _honest(folder / "deep_notebook_in_folder")
    (deep_in_folder / "ex02_data_sharding.ipynb").write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    for name, target in (("link_to_solution", course / "solutions" / EX01_PY), ("link_to_passwd", Path("/etc/passwd"))):
        (folder / name).mkdir()
        (folder / name / EX01_PY).symlink_to(target)
    (folder / "fifo").mkdir()
    os.mkfifo(folder / "fifo" / EX01_PY)
    _honest(folder / "z_honest_last")
    return {
        "deep_py": f"{EX01_PY} is too deeply nested to parse",
        "deep_notebook": "deep_notebook.ipynb is nested too deeply to read",
        "link_to_solution": f"{EX01_PY} {REFUSED}",
        "link_to_passwd": f"{EX01_PY} {REFUSED}",
        "fifo": f"{EX01_PY} is a named pipe (FIFO): submissions hold regular files only",
    }


def _graded_class(course: Path, folder: Path, *sandbox: str) -> None:
    said = _hostile_class(folder / "submissions", course)
    out = folder / "out"
    done = support.run_grader(
        course,
        "grade",
        *sorted(map(str, (folder / "submissions").iterdir())),
        "--out",
        str(out),
        "--exercises",
        "ex01",
        "--world-size",
        "2",
        "-j",
        "2",
        "--deadline",
        "10",
        *sandbox,
    )
    assert done.returncode == 0, done.stderr
    rows = {row["submission"]: row for row in csv.DictReader((out / "gradebook.csv").open())}
    names = sorted(p.name.removesuffix(".ipynb") for p in (folder / "submissions").iterdir())
    assert sorted(rows) == names and all((out / name / "results.json").is_file() for name in names)
    for name in ("a_honest_first", "z_honest_last", "deep_notebook_in_folder"):
        assert float(rows[name][EX01]) == float(rows[name]["max_score"]) > 0, rows[name]
    for name, sentence in said.items():
        results = json.loads((out / name / "results.json").read_text())
        assert float(rows[name]["total"]) == 0 == results["score"], name
        assert sentence in results["tests"][0]["output"], (name, results["tests"][0]["output"])
    leaked = [str(p) for p in out.rglob("*") if p.is_file() and PASSWD.encode() in p.read_bytes()]
    assert not leaked and PASSWD not in done.stdout + done.stderr


def test_a_batch_of_links_fifos_and_deep_files_gives_every_submission_its_row(
    hidden_course: Path, tmp_path: Path
) -> None:
    _graded_class(hidden_course, tmp_path, "--no-sandbox")


def test_the_same_batch_in_the_sandbox(bwrap_available: None, hidden_course: Path, tmp_path: Path) -> None:
    _graded_class(hidden_course, tmp_path)
