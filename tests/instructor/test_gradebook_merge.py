"""`grader gradebook merge`: shards joined into one gradebook; duplicates refused; what is missing named."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from grader.cli import main
from grader.instructor.gradebook import MergeError, merge
from grader.instructor.manifest import Manifest
from grader.instructor.shard import Shard

HEADER = ["submission", "ex01_process_group", "ex02_data_sharding", "total", "max_score", "seconds", "problem"]
CLASS = ("ada", "bo", "cy", "di", "ed")


def _row(name: str, points: int) -> list[str]:
    return [name, str(points), "0", str(points), "10", "1.0", ""]


def shard_output(
    folder: Path, names: list[str], shard: Shard | None = None, header: list[str] = HEADER, manifest: bool = True
) -> Path:
    """What `grader grade --out folder` leaves: a gradebook and the batch.json naming the whole class."""
    folder.mkdir(parents=True)
    with open(folder / "gradebook.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(_row(name, len(name)) for name in names)
    if manifest:
        Manifest(CLASS, ("ex01_process_group", "ex02_data_sharding"), shard).write(folder / "batch.json")
    return folder


def _rows(path: Path) -> list[list[str]]:
    return list(csv.reader(path.open()))


def test_shards_are_joined_sorted_by_name(tmp_path: Path) -> None:
    one = shard_output(tmp_path / "shard-1", ["di", "ada"], Shard(1, 2))
    two = shard_output(tmp_path / "shard-2", ["cy", "bo", "ed"], Shard(2, 2))
    result = merge([two, one], tmp_path / "gradebook.csv")
    rows = _rows(result.path)
    assert rows[0] == HEADER and [r[0] for r in rows[1:]] == sorted(CLASS)
    assert rows[1] == _row("ada", 3)
    assert result.complete and result.rows == 5


def test_a_submission_in_two_gradebooks_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    one = shard_output(tmp_path / "a", ["ada", "bo"], Shard(1, 2))
    two = shard_output(tmp_path / "b", ["bo", "cy"], Shard(2, 2))
    with pytest.raises(MergeError, match="'bo' is in both .*a and .*b"):
        merge([one, two], tmp_path / "gradebook.csv")
    assert not (tmp_path / "gradebook.csv").exists()


def test_gradebooks_of_different_exercises_are_refused(tmp_path: Path) -> None:
    one = shard_output(tmp_path / "a", ["ada"], Shard(1, 2))
    two = shard_output(tmp_path / "b", ["bo"], Shard(2, 2), header=HEADER[:2] + HEADER[3:])
    with pytest.raises(MergeError, match="columns differ"):
        merge([one, two], tmp_path / "gradebook.csv")


def test_missing_submissions_and_shards_are_named(tmp_path: Path) -> None:
    one = shard_output(tmp_path / "shard-1", ["ada", "di"], Shard(1, 3))
    three = shard_output(tmp_path / "shard-3", ["ed"], Shard(3, 3))  # interrupted: "cy" was its too
    result = merge([one, three], tmp_path / "gradebook.csv")
    assert result.missing_shards == ["2/3"]
    assert result.missing == ["bo", "cy"]
    assert not result.complete and result.rows == 3


def test_a_shard_that_died_before_its_gradebook_counts_as_missing(tmp_path: Path) -> None:
    one = shard_output(tmp_path / "shard-1", list(CLASS[:3]), Shard(1, 2))
    two = tmp_path / "shard-2"
    two.mkdir()
    Manifest(CLASS, ("ex01_process_group",), Shard(2, 2)).write(two / "batch.json")
    result = merge([one, two], tmp_path / "gradebook.csv")
    assert result.missing == ["di", "ed"] and result.missing_shards == []


def test_shards_of_different_splits_are_refused(tmp_path: Path) -> None:
    one = shard_output(tmp_path / "a", ["ada"], Shard(1, 2))
    two = shard_output(tmp_path / "b", ["bo"], Shard(2, 3))
    with pytest.raises(MergeError, match="different splits"):
        merge([one, two], tmp_path / "gradebook.csv")


def test_a_gradebook_without_manifest_is_merged_with_a_note(tmp_path: Path) -> None:
    plain = shard_output(tmp_path / "old", ["zed"], manifest=False)
    result = merge([plain / "gradebook.csv"], tmp_path / "gradebook.csv")
    assert result.complete and result.unaccounted == [plain / "gradebook.csv"]


def test_unreadable_sources_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MergeError, match="no such file"):
        merge([tmp_path / "nowhere"], tmp_path / "gradebook.csv")
    other = tmp_path / "scores.csv"
    other.write_text("name,score\nada,3\n")
    with pytest.raises(MergeError, match="not a gradebook"):
        merge([other], tmp_path / "gradebook.csv")
    with pytest.raises(MergeError, match="one of the gradebooks to merge"):
        merge([other], other)


def test_the_command_exits_1_and_names_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = shard_output(tmp_path / "shard-1", ["ada", "di"], Shard(1, 2))
    code = main(["gradebook", "merge", str(one), "--out", str(tmp_path / "all.csv")])
    err = capsys.readouterr().err
    assert code == 1
    assert "missing shard(s): 2/2" in err and "missing 3 submission(s)" in err and "bo, cy, ed" in err
    assert (tmp_path / "all.csv").is_file()


def test_the_command_refuses_duplicates_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = shard_output(tmp_path / "a", ["ada"], Shard(1, 2))
    code = main(["gradebook", "merge", str(one), str(one / "gradebook.csv"), "--out", str(tmp_path / "all.csv")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "graded twice" in err


NEWER = [*HEADER[:-1], "files", "problem", "review", "overrides"]  # what `grader grade` writes now


def test_a_gradebook_of_an_older_grader_merges_beside_a_newer_one_its_new_cells_empty(tmp_path: Path) -> None:
    old = shard_output(tmp_path / "old", ["ada", "bo"], Shard(1, 2))  # before the files, review, overrides columns
    new = tmp_path / "new"
    new.mkdir()
    with open(new / "gradebook.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([NEWER, ["cy", "2", "0", "2", "10", "1.0", "f.py", "", "x.py:1: y", "n: 1 -> 2"]])
    Manifest(CLASS, ("ex01_process_group", "ex02_data_sharding"), Shard(2, 2)).write(new / "batch.json")
    for order in ([old, new], [new, old]):
        rows = _rows(merge(order, tmp_path / "gradebook.csv").path)
        assert rows[0] == NEWER
        assert rows[1] == ["ada", "3", "0", "3", "10", "1.0", "", "", "", ""]
        assert rows[3] == ["cy", "2", "0", "2", "10", "1.0", "f.py", "", "x.py:1: y", "n: 1 -> 2"]


def test_a_batch_json_of_an_older_grader_without_seed_or_provenance_is_still_read(tmp_path: Path) -> None:
    one = shard_output(tmp_path / "old", ["ada", "bo"], Shard(1, 2), manifest=False)
    data = {"submissions": list(CLASS), "exercises": ["ex01_process_group"], "shard": {"index": 1, "count": 2}}
    (one / "batch.json").write_text(json.dumps(data))
    result = merge([one], tmp_path / "gradebook.csv")
    assert result.missing_shards == ["2/2"] and result.missing == ["cy", "di", "ed"]
