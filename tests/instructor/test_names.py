"""Names a class may hand in: reserved ones (`gradebook.csv`), names that are not UTF-8, names starting
with a dot, and zips that hold a file twice. Every one is graded into its own results folder or named
with the reason it is not, on every path (`--shard` and `grader slurm`'s job included): only what tools
leave in a class folder (.DS_Store, __MACOSX...) is left out, and named."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import warnings
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.catalog import load_catalog
from grader.instructor.gradescope import RESERVED, results_folder
from grader.instructor.shard import shard_of
from grader.instructor.submissions import name_of, prepare
from grader.intake import SubmissionError

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


@pytest.mark.parametrize("written", ["similarity", "Similarity.HTML", "report.html", "regrade.md", "overrides.csv"])
def test_no_submission_gets_the_name_of_what_the_instructors_commands_write_beside_it(written: str) -> None:
    assert results_folder(written).casefold() != written.casefold()


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


LEFTOVERS = {  # what tools leave in a class folder, and the reason each is said to be no submission
    ".DS_Store": "macOS Finder's folder settings",
    "__MACOSX": "the resource forks a macOS archiver leaves",
    "._ada.zip": "the AppleDouble metadata file macOS writes beside a file",
    "Thumbs.db": "Windows Explorer's thumbnail cache",
}
SRUN = '#!/bin/sh\nexec "$@"\n'  # the job's one task, run here
SBATCH = "#!/bin/sh\necho 99\n"  # the merge job task 1 submits: not run


def _class_with_dot_names_and_leftovers(folder: Path) -> None:
    for name in ("ada", ".late_bob"):  # a student's folder that starts with a dot is a submission
        (folder / name).mkdir(parents=True)
        shutil.copyfile(support.SOLUTIONS / "ex01_process_group.py", folder / name / "ex01_process_group.py")
    (folder / "__MACOSX").mkdir()
    for name in (".DS_Store", "._ada.zip", "Thumbs.db"):
        (folder / name).write_bytes(b"\x00\x05\x16\x07")


def _names_what_it_leaves_out(command: str, stderr: str) -> None:
    for name, reason in LEFTOVERS.items():
        assert f"grader {command}: left out {name}: {reason}, not a submission" in stderr, stderr
    assert ".late_bob" not in stderr, stderr


def test_slurm_grades_a_dot_name_and_names_each_leftover_it_leaves_out(tmp_path: Path) -> None:
    """A submission whose name starts with a dot is counted by `grader slurm` and graded by its job (the task's
    glob matches it); each tool leftover is named with the reason, by `grader slurm` and in the task's log."""
    folder = tmp_path / "submissions"
    _class_with_dot_names_and_leftovers(folder)
    results = tmp_path / "graded"
    options = ("--exercises", "ex01", "--world-size", "2", "--no-sandbox", "--shards", "1", "--results", str(results))
    done = support.run_grader(support.REPO, "slurm", str(folder), "--out", "job.sh", *options, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _names_what_it_leaves_out("slurm", done.stderr)
    assert "2 submission(s)" in done.stdout
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("sbatch", SBATCH)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(support.REPO),
        "SLURM_ARRAY_TASK_ID": "1",
        "SLURM_ARRAY_JOB_ID": "41",
        "NO_COLOR": "1",
    }
    task = subprocess.run(["bash", str(tmp_path / "job.sh")], env=env, capture_output=True, text=True, timeout=300)
    assert task.returncode == 0, task.stdout + task.stderr
    _names_what_it_leaves_out("grade", task.stderr)
    with (results / "shard-1" / "gradebook.csv").open() as rows:
        totals = {row["submission"]: float(row["total"]) for row in csv.DictReader(rows)}
    assert totals == {"ada": 5.0, ".late_bob": 5.0}, totals


def test_grade_names_each_leftover_and_refuses_when_nothing_else_is_given(tmp_path: Path) -> None:
    folder = tmp_path / "submissions"
    _class_with_dot_names_and_leftovers(folder)
    leftovers = [str(folder / name) for name in LEFTOVERS]
    done = support.run_grader(support.REPO, "grade", *leftovers, "--out", str(tmp_path / "out"), "--no-sandbox")
    assert done.returncode == 2, done.stderr
    _names_what_it_leaves_out("grade", done.stderr)
    assert done.stderr.strip().endswith("nothing to grade: every path given is a leftover of a tool, not a submission")
    assert not (tmp_path / "out").exists()


def test_a_zip_holding_a_file_twice_is_refused_as_ambiguous(tmp_path: Path) -> None:
    archive = tmp_path / "mallory.zip"
    with warnings.catch_warnings(), zipfile.ZipFile(archive, "w") as out:
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate, and writes it
        out.writestr("mallory/ex01_process_group.py", "honest = True")
        out.writestr("mallory/ex01_process_group.py", "honest = False")
    with pytest.raises(SubmissionError, match="is in the archive twice: which copy to grade is ambiguous"):
        prepare(archive, CATALOG, tmp_path / "work")
    assert name_of(archive) == "mallory"
