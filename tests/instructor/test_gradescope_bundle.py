"""`grader gradescope`: the autograder zip, its setup.sh, and its run_autograder run against a fake
/autograder (GRADESCOPE_ROOT) with good, stub, broken submissions and a grader that fails.

run_autograder grades with `grader grade`'s default sandbox, as it must in production (setup.sh
installs bubblewrap on the Gradescope image). The tests in which it gets as far as grading take
`bwrap_available`: skipped with the reason where bubblewrap cannot run, failed under CI. We chose
that over a switch that turns the sandbox off: such a switch would ship in every autograder.zip,
one setting away from grading untrusted uploads unconfined, and a test that flips it would no
longer run the script Gradescope runs. What grading does without a sandbox is tested by
test_batch.py; the tests of a grader that fails before grading run everywhere."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from grader.catalog import load_catalog
from grader.instructor.gradescope_bundle import PYTHON_MIN, TORCH_CPU_INDEX

from . import support
from .results_schema import max_score, validate_results
from .test_intake_paths import _repository

CATALOG = load_catalog(support.REPO)
TORCH = "2.13.0"


def build(out: Path, *args: str) -> Path:
    done = support.run_grader(support.REPO, "gradescope", "--out", str(out), "--torch", TORCH, *args, cwd=out.parent)
    assert done.returncode == 0, done.stderr
    return out / "autograder.zip"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("gradescope") / "out", "--exercises", support.CHEAP_EXERCISES)


def test_the_zip_holds_the_scripts_and_the_course_with_its_hidden_checks_and_no_answers(bundle: Path) -> None:
    with zipfile.ZipFile(bundle) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        catalog = tomllib.loads(archive.read("course/exercises/catalog.toml").decode())
    for script in ("setup.sh", "run_autograder"):
        assert stat.S_IMODE(infos[script].external_attr >> 16) == 0o755, script
    names = set(infos)
    assert "course/grader/checks/ex02_data_sharding/hidden.py" in names
    assert "course/pyproject.toml" in names and "course/exercises/ex01_process_group.py" in names
    assert "course/exercises/ex03_train_ddp.py" not in names  # only the assignment's exercises
    for name in names:
        assert not name.startswith(("course/solutions/", "course/tests/", "course/quizzes/", "course/docs/")), name
        assert "__pycache__" not in name and not name.endswith(".pyc"), name
    assert [e["id"] for e in catalog["exercise"]] == ["ex01_process_group", "ex02_data_sharding"]
    assert support.HIDDEN_CHECK in [c["name"] for e in catalog["exercise"] for c in e["check"]]


def test_the_same_course_gives_the_same_bytes(bundle: Path, tmp_path: Path) -> None:
    again = build(tmp_path / "again", "--exercises", support.CHEAP_EXERCISES)
    assert again.read_bytes() == bundle.read_bytes()


def test_setup_installs_the_pinned_cpu_torch_before_the_grader_and_bubblewrap(bundle: Path) -> None:
    setup = zipfile.ZipFile(bundle).read("setup.sh").decode()
    assert f"TORCH_VERSION={TORCH}" in setup and f"TORCH_INDEX={TORCH_CPU_INDEX}" in setup
    torch_line = setup.index('pip install -q "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX"')
    assert torch_line < setup.index('pip install -q -e "$COURSE"')  # editable: no copy of the checks in the environment
    assert "torch.version.cuda is not None" in setup  # the installed torch is checked to be the CPU build
    assert "apt-get install -y -q --no-install-recommends bubblewrap" in setup
    assert subprocess.run(["bash", "-n", "-"], input=setup, text=True).returncode == 0


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def test_setup_fails_loudly_on_a_python_too_old(bundle: Path, tmp_path: Path) -> None:
    """An image with only Python 3.10, where apt has no newer one: setup stops and says what to do."""
    fake = tmp_path / "bin"
    fake.mkdir()
    _script(fake / "python3", '#!/bin/sh\n[ "$1" = --version ] && echo "Python 3.10.12"\nexit 1\n')
    _script(fake / "apt-get", f'#!/bin/sh\necho "$@" >> {tmp_path / "apt.log"}\nexit 0\n')
    (tmp_path / "source").mkdir()
    setup = tmp_path / "source" / "setup.sh"
    setup.write_bytes(zipfile.ZipFile(bundle).read("setup.sh"))
    done = subprocess.run(
        ["/bin/bash", str(setup)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": str(fake), "GRADESCOPE_ROOT": str(tmp_path)},
    )
    minimum = ".".join(map(str, PYTHON_MIN))
    assert done.returncode == 1
    assert f"FAILED: the grader needs Python >= {minimum}" in done.stderr and "Python 3.10.12" in done.stderr
    apt = (tmp_path / "apt.log").read_text()
    assert f"install -y -q --no-install-recommends python{minimum} python{minimum}-venv" in apt
    assert not (tmp_path / "venv").exists()


def fake_root(bundle: Path, root: Path) -> Path:
    """/autograder after setup.sh: the zip in source/, and a venv whose python is this one with the
    bundle's own grader first on its path (so the test grades with what the zip holds)."""
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    (root / "venv" / "bin").mkdir(parents=True)
    _script(
        root / "venv" / "bin" / "python",
        f'#!/bin/sh\nPYTHONPATH={root / "source" / "course"} exec {sys.executable} "$@"\n',
    )
    (root / "submission").mkdir()
    return root


def run_autograder(root: Path) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    env = {**os.environ, "GRADESCOPE_ROOT": str(root)}
    env.pop("GRADER_COURSE", None)
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        ["bash", str(root / "source" / "run_autograder")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((root / "results" / "results.json").read_text())
    validate_results(data)
    return data, done


def _loose(folder: Path) -> None:
    for exercise in CATALOG.exercises[:2]:
        shutil.copyfile(support.SOLUTIONS / exercise.file, folder / exercise.file)


def _zipped(folder: Path) -> None:
    source = support.solutions(folder.parent / "work")
    shutil.make_archive(str(folder / "work"), "zip", source.parent, source.name)
    shutil.rmtree(source)


def _notebook(folder: Path) -> None:
    support.notebook(folder / "ex02_data_sharding.ipynb", CATALOG)


@pytest.mark.parametrize(
    "submit, full_marks_in", [(_loose, ("ex01", "ex02")), (_zipped, ("ex01", "ex02")), (_notebook, ("ex02",))]
)
def test_a_good_submission_in_any_form_gets_its_points(
    bwrap_available: None, bundle: Path, tmp_path: Path, submit, full_marks_in
) -> None:
    root = fake_root(bundle, tmp_path / "autograder")
    submit(root / "submission")
    data, done = run_autograder(root)
    for test in data["tests"]:
        expected = "passed" if test["name"].startswith(full_marks_in) else "failed"
        assert test["status"] == expected, (test, done.stdout)
    assert max_score(data) == 10 and data["score"] == (10 if len(full_marks_in) == 2 else 5)
    hidden = [t for t in data["tests"] if t["visibility"] == "hidden"]
    assert [t["name"] for t in hidden] == [f"ex02_data_sharding: {support.HIDDEN_CHECK}"]
    assert support.HIDDEN_CHECK not in data["output"]


def test_the_stub_scores_zero_with_every_check_saying_why(bwrap_available: None, bundle: Path, tmp_path: Path) -> None:
    root = fake_root(bundle, tmp_path / "autograder")
    support.stubs(root / "submission" / "exercises")
    data, _ = run_autograder(root)
    assert data["score"] == 0 and max_score(data) == 10 and len(data["tests"]) == 8
    assert all("not implemented yet" in t["output"] for t in data["tests"])


def test_a_broken_upload_scores_zero_with_the_reason(bwrap_available: None, bundle: Path, tmp_path: Path) -> None:
    root = fake_root(bundle, tmp_path / "autograder")
    (root / "submission" / "homework.zip").write_bytes(b"PK\x03\x04 this is not a zip")
    data, _ = run_autograder(root)
    assert data["score"] == 0 and "not a readable zip archive" in data["output"]


def test_a_grader_that_cannot_start_still_writes_a_zero_with_the_reason(bundle: Path, tmp_path: Path) -> None:
    root = fake_root(bundle, tmp_path / "autograder")
    shutil.rmtree(root / "venv")
    data, done = run_autograder(root)
    assert data["score"] == 0 and data["tests"] == []
    assert "the grader is not installed" in data["output"] and "setup.sh did not complete" in done.stdout


def test_a_broken_course_still_writes_a_zero_with_the_grader_s_one_line_reason(bundle: Path, tmp_path: Path) -> None:
    root = fake_root(bundle, tmp_path / "autograder")
    (root / "source" / "course" / "exercises" / "catalog.toml").write_text("[[exercise]\n")
    _loose(root / "submission")
    data, _ = run_autograder(root)
    assert data["score"] == 0 and "catalog.toml" in data["extra_data"]["grader_failure"]


def test_a_grader_crash_never_shows_its_traceback_to_the_student(bundle: Path, tmp_path: Path) -> None:
    root = fake_root(bundle, tmp_path / "autograder")
    python = root / "venv" / "bin" / "python"
    works = python.read_text().split("\n", 1)[1]
    crash = 'if [ "$3" = grade ]; then echo "Traceback (most recent call last): secret" >&2; exit 1; fi\n'
    _script(python, "#!/bin/sh\n" + crash + works)
    _loose(root / "submission")
    data, done = run_autograder(root)
    assert data["score"] == 0 and "the grader stopped with status 1" in data["output"]
    assert "Traceback" not in json.dumps(data) and "Traceback" in done.stdout  # instructors see it, students do not


def test_an_upload_scores_what_grader_grade_scores_for_the_same_files(
    bwrap_available: None, bundle: Path, tmp_path: Path
) -> None:
    """test_intake_paths.py's zipped repository end to end: handed to `grader grade` as alice.zip, and uploaded
    to the autograder as it is. The same files are graded, for the same reasons, to the same score."""
    _repository(tmp_path / "staging")
    handed_in = Path(shutil.make_archive(str(tmp_path / "alice"), "zip", tmp_path / "staging"))
    out = tmp_path / "graded"
    done = support.run_grader(
        support.REPO, "grade", str(handed_in), "--out", str(out), "--exercises", support.CHEAP_EXERCISES, "-j", "1"
    )
    assert done.returncode == 0, done.stderr
    graded = json.loads((out / "alice" / "results.json").read_text())
    root = fake_root(bundle, tmp_path / "autograder")
    shutil.copyfile(handed_in, root / "submission" / handed_in.name)
    uploaded, run = run_autograder(root)
    assert uploaded["score"] == graded["score"] == max_score(graded) == 10, run.stdout
    assert [(t["name"], t["status"]) for t in uploaded["tests"]] == [(t["name"], t["status"]) for t in graded["tests"]]
    assert graded["extra_data"]["files"] == [
        "ex01_process_group: exercises/ex01_process_group.py (in a course folder); set aside: "
        "notebooks/ex01_process_group.ipynb (the untouched stub)",
        "ex02_data_sharding: notebooks/ex02_data_sharding.ipynb (in a course folder, a notebook); set aside: "
        "exercises/ex02_data_sharding.py (the untouched stub)",
    ]
    assert uploaded["extra_data"]["files"] == [  # the same files, found in the zip the upload holds
        "ex01_process_group: alice.zip: exercises/ex01_process_group.py (in alice.zip, in a course folder); set "
        "aside: alice.zip: notebooks/ex01_process_group.ipynb (the untouched stub)",
        "ex02_data_sharding: alice.zip: notebooks/ex02_data_sharding.ipynb (in alice.zip, in a course folder, a "
        "notebook); set aside: alice.zip: exercises/ex02_data_sharding.py (the untouched stub)",
    ]
    assert "Files graded:\n" + "\n".join(uploaded["extra_data"]["files"]) in uploaded["output"]
