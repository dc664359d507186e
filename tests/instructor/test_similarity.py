"""`grader similarity`: renamed and reordered copies of the reference solutions are flagged and the course's
independent alternatives are not, at the one default threshold; its pages are inert; no score changes.

Skipped with the reason where copydetect (the `similarity` extra) is not installed; failed under CI, where
.ci/run installs it, so these tests never go unrun there by accident.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from markupsafe import escape
from variants import materialize

from grader.catalog import load_catalog
from grader.cli import main
from grader.instructor import class_report, grade_log, gradebook, gradescope, manifest, similarity
from grader.instructor.sample_submissions import disguised, renamed, reordered
from grader.instructor.submission_grade import SubmissionGrade
from grader.judge.verdict import CheckResult
from grader.report.sink import Sink

from . import support

CATALOG = load_catalog(support.REPO)
COPIES = ("renamed", "reordered", "renamed_and_reordered")


@pytest.fixture(scope="module")
def detector() -> ModuleType:
    try:
        return similarity.load_detector()
    except similarity.SimilarityError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the similarity tests must run under CI, where .ci/run installs the extra: {exc}")
        pytest.skip(str(exc))


def _graded(out: Path, paths: list[Path]) -> Path:
    """OUT as `grader grade` leaves it before grading: its batch.json, naming the submissions."""
    names = tuple(p.name.removesuffix(".ipynb") for p in paths)
    manifest.Manifest(names, tuple(e.id for e in CATALOG.exercises)).write(out / manifest.FILENAME)
    return out


def _copies(root: Path) -> list[Path]:
    """The solutions, and three copies of them: local names renamed, functions reordered, both."""
    made = {
        "original": lambda source, exercise: source,
        "renamed": lambda source, exercise: renamed(source, exercise.function_names),
        "reordered": lambda source, exercise: reordered(source),
        "renamed_and_reordered": lambda source, exercise: disguised(source, exercise.function_names),
    }
    folders = []
    for name, make in made.items():
        folder = root / name
        folder.mkdir(parents=True)
        for exercise in CATALOG.exercises:
            (folder / exercise.file).write_text(make(CATALOG.solution_path(exercise).read_text(), exercise))
        folders.append(folder)
    return folders


def _alternatives(root: Path) -> list[Path]:
    """Each alternative of tests/alternatives/ written from scratch (`source`, not a patch of the solution), as a
    submission holding that one exercise's file."""
    folders = []
    for exercise in CATALOG.exercises:
        spec = tomllib.loads((support.REPO / "tests" / "alternatives" / f"{Path(exercise.file).stem}.toml").read_text())
        for variant in spec.get("alternative", []):
            if "source" in variant:
                folder = root / f"{exercise.id}-{variant['name']}"
                folder.mkdir(parents=True)
                materialize(exercise.file, variant, folder)
                folders.append(folder)
    return folders


def _flagged(findings: similarity.Findings) -> dict[str, set[frozenset[str]]]:
    assert all(e.flagged == len(e.shown) for e in findings.exercises), "more flagged pairs than pages"
    return {e.exercise: {frozenset((s.pair.a.who, s.pair.b.who)) for s in e.shown} for e in findings.exercises}


def test_renamed_and_reordered_copies_are_flagged_and_independent_alternatives_are_not(
    detector: ModuleType, tmp_path: Path
) -> None:
    copies = _copies(tmp_path / "subs")
    alternatives = _alternatives(tmp_path / "subs")
    assert len(alternatives) >= 30, "the course's alternatives written from scratch: the independent ones"
    stubs = [support.stubs(tmp_path / "subs" / name) for name in ("stub1", "stub2")]  # the same, and no one's code
    paths = copies + alternatives + stubs
    findings = similarity.run(_graded(tmp_path / "out", paths), paths, [], CATALOG)
    every_copy = {frozenset(pair) for pair in itertools.combinations(("original", *COPIES), 2)}
    for exercise, flagged in _flagged(findings).items():
        assert flagged == every_copy, f"{exercise}: {sorted(map(sorted, flagged ^ every_copy))}"
    for found in findings.exercises:
        assert found.compared == 6 + sum(a.name.startswith(found.exercise) for a in alternatives)
        assert found.without_code == 2  # the stubs: what they share is the distribution code
    assert findings.threshold == similarity.THRESHOLD and not findings.not_compared


def test_worker_processes_find_what_one_process_finds(detector: ModuleType, tmp_path: Path) -> None:
    paths = _copies(tmp_path / "subs")[:2] + _alternatives(tmp_path / "subs")[:6]
    out = _graded(tmp_path / "out", paths)

    def found(jobs: int) -> list[tuple[str, str, str, tuple[float, float]]]:
        findings = similarity.run(out, paths, [], CATALOG, jobs=jobs)
        return [
            (s.pair.exercise, s.pair.a.who, s.pair.b.who, s.pair.shares) for e in findings.exercises for s in e.shown
        ]

    alone = found(1)
    assert len(alone) == len(CATALOG.exercises) and found(2) == alone


def test_the_screen_computes_copydetects_own_similarity_for_every_pair(
    detector: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The all-pairs screen (numpy) and copydetect's `compare_files` give the same shares, pair by pair."""
    for exercise in (CATALOG.get("ex04"), CATALOG.get("ex09")):
        spec = tomllib.loads((support.REPO / "tests" / "alternatives" / f"{Path(exercise.file).stem}.toml").read_text())
        codes = [CATALOG.solution_path(exercise).read_text()]
        for variant in spec["alternative"]:
            folder = tmp_path / exercise.id / variant["name"]
            folder.mkdir(parents=True)
            codes.append(materialize(exercise.file, variant, folder).read_text())
        stub = similarity.stub_kgrams(detector, CATALOG, exercise.id)
        prints = [similarity.fingerprint(detector, code, stub) for code in codes]
        screened = similarity.shares(prints, ~np.eye(len(prints), dtype=bool))
        monkeypatch.setattr(similarity, "SCREEN_CELLS", 1)  # one row at a time, as for a file of a mebibyte
        assert (similarity.shares(prints, ~np.eye(len(prints), dtype=bool)) == screened).all()
        monkeypatch.undo()
        for a, b in itertools.combinations(range(len(prints)), 2):
            _, (share_a, share_b), _ = detector.compare_files(prints[a].fingerprint, prints[b].fingerprint)
            assert (screened[a, b], screened[b, a]) == pytest.approx((share_a, share_b)), (exercise.id, a, b)


def _results(passed: bool) -> list[CheckResult]:
    return [
        CheckResult(
            "passed" if passed else "failed",
            "" if passed else "wrong",
            exercise=exercise.id,
            check=spec.name,
            world_size=2,
            seconds=0.1,
            points=spec.points if passed else 0.0,
            max_points=spec.points,
            visibility=spec.visibility,
        )
        for exercise in CATALOG.exercises
        for spec in exercise.checks
    ]


def _out_with_grades(out: Path, paths: list[Path]) -> Path:
    """OUT as `grader grade` writes it, from made-up grades: results.json each, the gradebook, the grade log and
    the class report."""
    _graded(out, paths)
    grades = [SubmissionGrade(p.name, _results(passed=i % 2 == 0), 1.0) for i, p in enumerate(paths)]
    sinks: list[Sink[SubmissionGrade]] = [
        gradescope.ResultsFiles(out, CATALOG, "hidden"),
        gradebook.Gradebook(out / gradebook.FILENAME, CATALOG),
        grade_log.GradeLog(out / grade_log.FILENAME),
    ]
    for grade in grades:
        for sink in sinks:
            sink.on_result(grade)
    for sink in sinks:
        sink.close()
    class_report.write_report(out / class_report.FILENAME, CATALOG, grades, "Class report", plots=False)
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_it_never_changes_a_score_and_links_the_class_report_once(
    detector: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _copies(tmp_path / "subs")[:2]
    out = _out_with_grades(tmp_path / "out", paths)
    before = _files(out)
    for _ in range(2):  # a second run replaces its link and its pages
        assert main(["similarity", str(out), *map(str, paths)]) == 0
    said = capsys.readouterr().out
    assert f"similarity: {len(CATALOG.exercises)} pair(s) flagged" in said and "no score changed" in said
    after = _files(out)
    for name, content in before.items():
        if name != class_report.FILENAME:
            assert after[name] == content, f"{name} changed"
    report = after[class_report.FILENAME].decode()
    assert report.count('<section id="similarity">') == 1 and 'href="similarity.html"' in report
    section = re.escape(similarity.START_MARK) + ".*?" + re.escape(similarity.END_MARK)
    assert re.sub(section, similarity.START_MARK, report, flags=re.S) == before[class_report.FILENAME].decode()
    pages = [n for n in after if n.startswith(f"{similarity.FOLDER}/{similarity.PAIRS_FOLDER}/")]
    assert len(pages) == len(CATALOG.exercises)  # one pair per exercise: no page left from the first run


def test_the_class_report_rewritten_in_place_keeps_the_link_and_one_written_elsewhere_has_none(
    detector: ModuleType, tmp_path: Path
) -> None:
    paths = _copies(tmp_path / "subs")[:2]
    out = _out_with_grades(tmp_path / "out", paths)
    assert main(["similarity", str(out), *map(str, paths)]) == 0
    linked = (out / class_report.FILENAME).read_text(encoding="utf-8")
    assert main(["report", str(out), "--out", str(out / class_report.FILENAME), "--no-plots"]) == 0
    again = (out / class_report.FILENAME).read_text(encoding="utf-8")
    section = re.escape(similarity.START_MARK) + ".*?" + re.escape(similarity.END_MARK)
    assert re.search(section, again, re.S)[0] == re.search(section, linked, re.S)[0]  # type: ignore[index]
    assert main(["report", str(out), "--out", str(tmp_path / "elsewhere.html"), "--no-plots"]) == 0
    assert 'href="similarity.html"' not in (tmp_path / "elsewhere.html").read_text(encoding="utf-8")


def test_the_pages_show_what_students_wrote_as_text_and_say_what_they_cannot_show(
    detector: ModuleType, tmp_path: Path
) -> None:
    original = support.solutions(tmp_path / "subs" / "original")
    hostile = tmp_path / "subs" / "<img src=x onerror=alert(1)>"
    hostile.mkdir()
    source = CATALOG.solution_path(CATALOG.get("ex01")).read_text()
    script = "</pre><script>alert(1)</script>\x1b]52;c;aGk=\x07"
    (hostile / "ex01_process_group.py").write_text(source.replace('"""Leave', f'"""{script} Leave', 1))
    out = _graded(tmp_path / "out", [original, hostile])
    findings = similarity.run(out, [original, hostile], [], CATALOG)
    assert _flagged(findings)["ex01_process_group"] == {frozenset(("original", hostile.name))}
    pages = [out / similarity.FILENAME, *sorted((out / similarity.FOLDER / similarity.PAIRS_FOLDER).iterdir())]
    for page in pages:
        html = page.read_text()
        for forbidden in ("<script", "<img src=x", "\x1b", "\x07", "http://", "https://", "<link"):
            assert forbidden not in html, f"{page.name} holds {forbidden!r}"
        for line in similarity.CANNOT_SHOW:
            assert escape(line) in html
    pair = (out / similarity.FOLDER / similarity.PAIRS_FOLDER / "ex01_process_group-001.html").read_text()
    assert "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;\\x1b]52;c;aGk=\\x07" in pair
    assert "&lt;img src=x onerror=alert(1)&gt;" in pair and "<mark>" in pair


def test_a_notebook_is_compared_by_its_exercise_cells(detector: ModuleType, tmp_path: Path) -> None:
    original = support.solutions(tmp_path / "subs" / "original")
    book = support.notebook(tmp_path / "subs" / "ex02_data_sharding.ipynb", CATALOG)
    out = _graded(tmp_path / "out", [original, book])
    findings = similarity.run(out, [original, book], [], CATALOG)
    assert _flagged(findings)["ex02_data_sharding"] == {frozenset(("original", "ex02_data_sharding"))}
    page = (out / similarity.FOLDER / similarity.PAIRS_FOLDER / "ex02_data_sharding-001.html").read_text()
    assert "notebook: its exercise cells" in page


def test_earlier_terms_are_compared_with_the_batch_never_with_each_other(detector: ModuleType, tmp_path: Path) -> None:
    earlier = [support.solutions(tmp_path / "2024" / "ada")]
    old_out = _graded(tmp_path / "graded-2024", earlier)
    similarity.run(old_out, earlier, [], CATALOG)  # stores what it compared: the results folder is now an archive
    support.solutions(tmp_path / "2023" / "bo")  # a plain folder of an earlier term's submissions
    (tmp_path / "2023" / ".DS_Store").write_text("")  # a tool's leftover: not a submission
    copy = tmp_path / "subs" / "cy"
    copy.mkdir(parents=True)
    for exercise in CATALOG.exercises:
        source = CATALOG.solution_path(exercise).read_text()
        (copy / exercise.file).write_text(disguised(source, exercise.function_names))
    out = _graded(tmp_path / "out", [copy])
    findings = similarity.run(out, [copy], [old_out, tmp_path / "2023"], CATALOG)
    ada, bo = f"{old_out}/ada", f"{tmp_path / '2023'}/bo"
    for found in findings.exercises:
        found_pairs = {(s.pair.a.who, s.pair.b.who, s.pair.b.archived) for s in found.shown}
        assert found_pairs == {("cy", ada, True), ("cy", bo, True)}
        assert found.compared == 1 and found.archived == 2 and found.pairs == 2  # ada and bo: never paired
    assert "earlier term" in (out / similarity.FILENAME).read_text()


def test_without_the_extra_it_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [support.solutions(tmp_path / "subs" / "ada")]
    out = _graded(tmp_path / "out", paths)
    monkeypatch.setitem(sys.modules, "copydetect", None)  # what `import copydetect` meets where it is not installed
    assert main(["similarity", str(out), *map(str, paths)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and similarity.INSTALL in err and "Traceback" not in err
    assert not (out / similarity.FILENAME).exists()


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("no batch", "is not a `grader grade --out` folder: it has no batch.json"),
        ("no submission", "name the submissions"),
        ("not of the batch", "is not a submission of this batch"),
        ("a results folder without code", "is a `grader grade` results folder without the code it graded"),
        ("the batch as its own archive", "is the batch itself"),
    ],
)
def test_bad_input_is_one_sentence(case: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ada = support.solutions(tmp_path / "subs" / "ada")
    out = _graded(tmp_path / "out", [ada])
    argv = ["similarity", str(out), str(ada)]
    if case == "no batch":
        (out / manifest.FILENAME).unlink()
    elif case == "no submission":
        argv = argv[:2]
    elif case == "not of the batch":
        argv.append(str(shutil.copytree(ada, tmp_path / "subs" / "late")))
    elif case == "a results folder without code":
        argv += ["--archive", str(_graded(tmp_path / "graded-2024", [ada]))]
    else:
        argv += ["--archive", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_most_similar_pairs_get_pages_and_the_rest_are_counted(
    detector: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(similarity, "PAIRS_SHOWN", 2)
    paths = _copies(tmp_path / "subs")
    findings = similarity.run(_graded(tmp_path / "out", paths), paths, [], CATALOG)
    for found in findings.exercises:
        assert found.flagged == 6 and len(found.shown) == 2 and found.groups == [["original", *sorted(COPIES)]]
        assert [s.pair.score for s in found.shown] == sorted((s.pair.score for s in found.shown), reverse=True)
    html = (tmp_path / "out" / similarity.FILENAME).read_text()
    assert html.count("The 2 most similar have a page.") == len(CATALOG.exercises)
    assert len(list((tmp_path / "out" / similarity.FOLDER / similarity.PAIRS_FOLDER).iterdir())) == 2 * 18


def test_a_lower_threshold_flags_alternatives_that_share_less(detector: ModuleType, tmp_path: Path) -> None:
    paths = [a for a in _alternatives(tmp_path / "subs") if a.name.startswith("ex09")]
    out = _graded(tmp_path / "out", paths)
    assert not _flagged(similarity.run(out, paths, [], CATALOG))["ex09_checkpoint"]
    lower = _flagged(similarity.run(out, paths, [], CATALOG, threshold=0.5))["ex09_checkpoint"]
    assert lower and all(len(pair) == 2 for pair in lower)


def test_the_threshold_is_a_share(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["similarity", str(tmp_path), "x", "--threshold", "70"])
    assert stopped.value.code == 2 and "70 is not a share between 0 and 1" in capsys.readouterr().err


def test_a_changed_course_is_said(tmp_path: Path) -> None:
    ada = support.solutions(tmp_path / "subs" / "ada")
    out = _graded(tmp_path / "out", [ada])
    manifest.Manifest(("ada",), ("ex99_gone",)).write(out / manifest.FILENAME)
    with pytest.raises(similarity.SimilarityError, match="names an exercise this course lacks"):
        similarity.run(out, [ada], [], CATALOG)
