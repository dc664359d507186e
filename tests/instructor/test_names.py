"""Names a class may hand in: reserved ones (`gradebook.csv`), names that are not UTF-8, names starting
with a dot, and zips that hold a file twice. Every one is graded into its own results folder or named
with the reason it is not, on every path (`--shard` included)."""

from __future__ import annotations

import json
import os
import shutil
import warnings
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.catalog import load_catalog
from grader.instructor.gradescope import RESERVED, results_folder
from grader.instructor.shard import shard_of
from grader.instructor.submissions import SubmissionError, name_of, prepare

from . import support

CATALOG = load_catalog(support.REPO)
NOT_UTF8 = os.fsdecode(b"caf\xe9-\xff")  # a Latin-1 name, as a zip tool on Windows leaves it
# names as the command line hands them over: any text, and any bytes (os.fsdecode: lone surrogates)
NAMES = st.one_of(
    st.text(st.characters(codec=None), max_size=200),
    st.binary(max_size=200).map(os.fsdecode),
    st.sampled_from(sorted(RESERVED)).map(str.upper),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(NAMES, min_size=1, max_size=4, unique=True))
def test_any_names_get_folders_of_their_own_that_are_no_file_of_the_batch(names: list[str]) -> None:
    folders = [results_folder(name) for name in names]
    assert len(set(folders)) == len(names), (names, folders)
    for folder in folders:
        assert folder.casefold() not in RESERVED and "/" not in folder and folder not in ("", ".", "..")
        folder.encode("utf-8")  # a path every filesystem and report can hold
    assert all(1 <= shard_of(name, 3) <= 3 for name in names)


@pytest.mark.parametrize("shard", [[], ["--shard", "1/1"]], ids=["whole", "shard"])
def test_reserved_and_undecodable_names_each_get_their_results_json(tmp_path: Path, shard: list[str]) -> None:
    folder = tmp_path / "subs"
    names = ["gradebook.csv", "report.html", "Grades.jsonl", NOT_UTF8]
    for name in names:
        (folder / name).mkdir(parents=True)
        shutil.copyfile(support.SOLUTIONS / "ex01_process_group.py", folder / name / "ex01_process_group.py")
    out = tmp_path / "out"
    done = support.run_grader(
        support.REPO,
        "grade",
        *(str(folder / name) for name in names),
        "--out",
        str(out),
        "--exercises",
        "ex01",
        "--world-size",
        "2",
        "--no-sandbox",
        *shard,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    for name in names:
        results = json.loads((out / results_folder(name) / "results.json").read_text())
        assert results["score"] == results["extra_data"]["max_score"] > 0, name
    assert (out / "gradebook.csv").is_file() and (out / "report.html").is_file()


def test_slurm_names_each_entry_it_leaves_out_and_why(tmp_path: Path) -> None:
    folder = tmp_path / "submissions"
    for name in ("ada", ".late_bob", ".DS_Store"):
        (folder / name).mkdir(parents=True)
    done = support.run_grader(support.REPO, "slurm", str(folder), "--out", "job.sh", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name in (".late_bob", ".DS_Store"):
        assert f"left out {name}: a name starting with a dot" in done.stderr
    assert "1 submission(s)" in done.stdout


def test_a_zip_holding_a_file_twice_is_refused_as_ambiguous(tmp_path: Path) -> None:
    archive = tmp_path / "mallory.zip"
    with warnings.catch_warnings(), zipfile.ZipFile(archive, "w") as out:
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate, and writes it
        out.writestr("mallory/ex01_process_group.py", "honest = True")
        out.writestr("mallory/ex01_process_group.py", "honest = False")
    with pytest.raises(SubmissionError, match="is in the archive twice: which copy to grade is ambiguous"):
        prepare(archive, CATALOG, tmp_path / "work")
    assert name_of(archive) == "mallory"
