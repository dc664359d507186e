"""Each exercise package's manifest.toml draws its trust boundary: what enters a sandbox (`rank`), what
only the grader runs (`judge`) and what never leaves the course (`secret`). A file it does not list
stays out of a sandbox and out of a release; the lint names every file out of place."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import REPO
from instructor import support

from grader.catalog import load_catalog
from grader.checks.manifest import MANIFEST, ManifestError, load_manifest, package_files
from grader.course_lint import lint
from grader.instructor.release import ReleaseError, release
from grader.sandbox.rank_view import rank_side_files

PACKAGE = REPO / "grader"
EXERCISE_PACKAGES = sorted(init.parent for init in PACKAGE.glob("checks/*/__init__.py"))
EX08 = "grader/checks/ex08_ring_allreduce"


def _manifest(folder: Path, text: str, *files: str) -> Path:
    """An exercise package at `folder` holding `files` (each a line of Python) and a manifest of `text`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("__init__.py", *files):
        (folder / name).write_text("X = 1\n")
    (folder / MANIFEST).write_text(text)
    return folder


def _fake_grader(root: Path, manifest: str, *files: str) -> Path:
    """A grader package with an engine, a rank folder and one exercise package ex99_fake."""
    package = root / "grader"
    for name in ("__init__.py", "checks/__init__.py", "engine/__init__.py", "rank/__init__.py"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("")
    _manifest(package / "checks" / "ex99_fake", manifest, *files)
    return package


def test_a_judge_helper_stays_out_of_the_view_until_the_manifest_lists_it_as_rank(tmp_path: Path) -> None:
    files = ("workers.py", "checks.py", "judge_helper.py")
    package = _fake_grader(tmp_path, 'rank = ["workers.py"]\njudge = ["checks.py"]\n', *files)
    view = {str(path) for path in rank_side_files(package)}
    assert "checks/ex99_fake/workers.py" in view and "checks/ex99_fake/__init__.py" in view
    assert "checks/ex99_fake/judge_helper.py" not in view, "a file no list names entered the sandbox"
    assert "checks/ex99_fake/checks.py" not in view
    (package / "checks" / "ex99_fake" / MANIFEST).write_text(
        'rank = ["workers.py", "judge_helper.py"]\njudge = ["checks.py"]\n'
    )
    assert "checks/ex99_fake/judge_helper.py" in {str(path) for path in rank_side_files(package)}


def test_the_view_refuses_a_package_whose_manifest_is_wrong(tmp_path: Path) -> None:
    package = _fake_grader(tmp_path, 'rank = ["workers.py", "gone.py"]\n', "workers.py")
    with pytest.raises(ManifestError, match="gone.py is listed in rank, but .* has no such file"):
        rank_side_files(package)


@pytest.mark.parametrize("package", EXERCISE_PACKAGES, ids=lambda path: path.name)
def test_every_exercise_package_lists_each_of_its_files_once(package: Path) -> None:
    manifest = load_manifest(package)
    listed = [name for name, _ in manifest.sides()]
    assert len(listed) == len(set(listed))
    assert sorted(listed) == package_files(package)
    assert "workers.py" in manifest.rank and "checks.py" in manifest.judge


def test_the_real_view_holds_no_judge_or_secret_file() -> None:
    view = set(rank_side_files(PACKAGE))
    off_ranks = {
        package.relative_to(PACKAGE) / name
        for package in EXERCISE_PACKAGES
        for name in (*load_manifest(package).judge, *load_manifest(package).secret)
    }
    assert off_ranks and not view & off_ranks, sorted(view & off_ranks)
    assert Path("checks/ex08_ring_allreduce/mixtures.py") not in view  # imported by checks.py alone
    assert Path("checks/ex08_ring_allreduce/inputs.py") in view  # workers.py imports it


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('rank = ["workers.py"', "not valid TOML"),
        ('rank = ["workers.py"]\nshared = []\n', "unknown key(s) 'shared': a manifest has only rank, judge, secret"),
        ('rank = "workers.py"\n', "rank must be a list of file names, not str 'workers.py'"),
        ('judge = { file = "checks.py" }\n', "judge must be a list of file names, not dict"),
        ("rank = [1]\n", "rank: 1 is not a file name (a string)"),
        ('rank = ["../../paths.py"]\n', "rank: '../../paths.py' is not the name of a file beside the manifest"),
        ('rank = ["__init__.py"]\n', "rank: __init__.py is implicit and is not listed"),
        ('rank = ["workers.py"]\njudge = ["workers.py"]\n', "workers.py is listed in both rank and judge"),
        ('judge = ["checks.py", "checks.py"]\n', "checks.py is listed twice in judge"),
        ('rank = ["workers.py"]\nsecret = ["hidden.py"]\n', "hidden.py is listed in secret, but "),
    ],
    ids=[
        "toml",
        "unknown-key",
        "not-a-list",
        "a-table",
        "not-a-name",
        "a-path",
        "implicit",
        "two-lists",
        "twice",
        "gone",
    ],
)
def test_a_wrong_manifest_is_refused_with_its_file_and_reason(tmp_path: Path, text: str, said: str) -> None:
    folder = _manifest(tmp_path / "ex99_fake", text, "workers.py", "checks.py")
    with pytest.raises(ManifestError) as caught:
        load_manifest(folder)
    assert caught.value.path == folder / MANIFEST
    assert str(caught.value).startswith(f"{folder / MANIFEST}: ") and said in caught.value.reason


def test_a_package_without_a_manifest_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "ex99_fake"
    folder.mkdir()
    with pytest.raises(ManifestError, match=r"manifest.toml: missing: every exercise package lists its files"):
        load_manifest(folder)


@pytest.fixture
def course(tmp_path: Path) -> Path:
    return support.course_copy(tmp_path / "course")


def _line_of(path: Path, text: str) -> int:
    return path.read_text().splitlines().index(text) + 1


def test_the_lint_names_a_file_no_list_names(course: Path) -> None:
    (course / EX08 / "notes.py").write_text("NOTE = 1\n")
    assert f"{EX08}/manifest.toml: notes.py is in no list: name it in rank, judge or secret" in "\n".join(
        lint(course)[0]
    )


def test_the_lint_names_a_listed_file_that_is_missing_and_one_listed_twice(course: Path) -> None:
    manifest = course / EX08 / MANIFEST
    manifest.write_text(
        manifest.read_text()
        .replace('judge = ["checks.py", "mixtures.py"]', 'judge = ["checks.py", "mixtures.py", "ghost.py"]')
        .replace('rank = ["workers.py", "inputs.py"', 'rank = ["workers.py", "inputs.py", "mixtures.py"')
    )
    problems = lint(course)[0]
    judge_line = _line_of(manifest, 'judge = ["checks.py", "mixtures.py", "ghost.py"]')
    assert f"{EX08}/manifest.toml:{judge_line}: ghost.py is listed in judge, but {EX08} has no such file" in problems
    assert (
        f"{EX08}/manifest.toml:{judge_line}: mixtures.py is listed in both rank and judge: "
        "each file runs on exactly one side" in problems
    )


@pytest.mark.parametrize(
    ("file", "imports", "module"),
    [
        ("inputs.py", "from grader.checks.ex08_ring_allreduce.mixtures import explain", f"{EX08}/mixtures"),
        ("inputs.py", "from . import checks", f"{EX08}/checks"),
        ("workers.py", "    from grader.judge.api import check", "grader/judge/api"),
        ("workers.py", "import grader.instructor.release", "grader/instructor/release"),
    ],
    ids=["judge-helper", "relative", "judge-lazily", "instructor"],
)
def test_the_lint_names_a_rank_file_importing_what_no_sandbox_holds(
    course: Path, file: str, imports: str, module: str
) -> None:
    path = course / EX08 / file
    body = f"def _late():\n{imports}\n" if imports.startswith(" ") else f"{imports}\n"
    path.write_text(path.read_text() + "\n\n" + body)
    line = _line_of(path, imports)
    expected = (
        f"{EX08}/{file}:{line}: rank-side {file} imports {module.replace('/', '.')}, which never enters a sandbox"
    )
    assert [p for p in lint(course)[0] if p.startswith(expected)], lint(course)[0]


def test_the_lint_reports_a_malformed_or_missing_manifest_without_a_traceback(course: Path) -> None:
    (course / EX08 / MANIFEST).write_text('rank = ["workers.py"\n')
    (course / "grader/checks/ex01_process_group" / MANIFEST).unlink()
    problems = lint(course)[0]
    assert [p for p in problems if p.startswith(f"{EX08}/manifest.toml: not valid TOML")], problems
    assert "grader/checks/ex01_process_group/manifest.toml: missing: every exercise package lists its files" in (
        "\n".join(problems)
    )


def test_the_release_leaves_out_the_files_the_manifest_calls_secret(tmp_path: Path) -> None:
    package = tmp_path / "grader"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    ex02 = package / "checks" / "ex02_data_sharding"
    for name in ("rubric.py", "stray.py", "notes.toml"):
        (ex02 / name).write_text("# instructor's\n")
    (ex02 / MANIFEST).write_text(
        'rank = ["workers.py"]\njudge = ["checks.py", "notes.toml"]\nsecret = ["hidden.py", "rubric.py"]\n'
    )
    out = tmp_path / "student"
    release(load_catalog(REPO), out, package)
    shipped = out / "grader" / "checks" / "ex02_data_sharding"
    assert {p.name for p in shipped.iterdir()} == {"__init__.py", MANIFEST, "checks.py", "notes.toml", "workers.py"}
    copy = load_manifest(shipped)
    assert (copy.rank, copy.judge, copy.secret) == (("workers.py",), ("checks.py", "notes.toml"), ())
    ex10 = load_manifest(out / "grader" / "checks" / "ex10_scaling")  # its answers stay, and no value of theirs ships
    assert ex10.judge == ("checks.py", "properties.py", "plots.py") and ex10.secret == ()
    assert not (out / "grader" / "checks" / "ex10_scaling" / "answers.py").exists()


def test_the_release_refuses_a_wrong_manifest_before_writing(tmp_path: Path) -> None:
    package = tmp_path / "grader"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "checks" / "ex02_data_sharding" / MANIFEST).write_text('rank = ["workers.py"]\nsecrets = []\n')
    with pytest.raises(ReleaseError, match="cannot tell the secret files from the shipped ones: .*unknown key"):
        release(load_catalog(REPO), tmp_path / "student", package)
    assert not (tmp_path / "student").exists()
