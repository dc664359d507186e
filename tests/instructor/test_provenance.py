"""The provenance of grades: one hash per exercise over its catalog entry and checks package, and what changed."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from grader.catalog import load_catalog
from grader.instructor.provenance import Provenance, changes, checks_folder, exercise_hash, of_batch

from . import support

CATALOG = load_catalog(support.REPO).select(["ex01", "ex02"])
EX01, EX02 = CATALOG.exercises


def _package(tmp_path: Path) -> Path:
    folder = tmp_path / "ex01_process_group"
    shutil.copytree(checks_folder(EX01), folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def test_the_hash_is_of_the_package_as_imported_and_changes_with_any_of_its_files(tmp_path: Path) -> None:
    folder = _package(tmp_path)
    digest = exercise_hash(EX01, folder)
    assert digest == exercise_hash(EX01, checks_folder(EX01))  # the copy hashes as the original
    for name in ("checks.py", "workers.py", "manifest.toml"):
        path = folder / name
        kept = path.read_bytes()
        path.write_bytes(kept + b"\n")
        assert exercise_hash(EX01, folder) != digest, name
        path.write_bytes(kept)
    (folder / "hypotheses.toml").write_text("")
    assert exercise_hash(EX01, folder) != digest  # a new file counts too


def test_compiled_files_do_not_count_and_the_catalog_entry_does(tmp_path: Path) -> None:
    folder = _package(tmp_path)
    digest = exercise_hash(EX01, folder)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "checks.cpython-311.pyc").write_bytes(b"compiled")
    assert exercise_hash(EX01, folder) == digest
    worth_more = dataclasses.replace(EX01, checks=(dataclasses.replace(EX01.checks[0], points=9), *EX01.checks[1:]))
    assert exercise_hash(worth_more, folder) != digest


def test_a_batch_records_one_hash_per_graded_exercise_and_reads_back() -> None:
    made = of_batch(CATALOG)
    assert set(made.exercises) == {EX01.id, EX02.id} and len(made.course) == 64
    assert Provenance.from_json(made.to_json()) == made


def test_changes_name_each_exercise_whose_checks_changed_and_the_grader_version() -> None:
    old = Provenance("0.1.0", "abc", "c1", {EX01.id: "h1", EX02.id: "h2"})
    assert changes(old, old) == []
    new = Provenance("0.2.0", "abc", "c1", {EX01.id: "h1", EX02.id: "h3"})
    assert changes(old, new) == ["grader version 0.1.0 -> 0.2.0", f"{EX02.id}: its checks changed"]
    assert changes(None, new) == ["the old batch recorded no provenance (an older grader): what changed is unknown"]
