"""`--shard I/N`: every submission in exactly one shard, decided by its name, whatever the order."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from grader.instructor.shard import Shard, ShardError, parse_shard, select, shard_of

NAMES = [f"student{i:03d}" for i in range(300)]


@pytest.mark.parametrize("text, index, count", [("1/1", 1, 1), ("2/8", 2, 8), (" 3 / 3 ", 3, 3)])
def test_i_of_n_is_read(text: str, index: int, count: int) -> None:
    assert parse_shard(text) == Shard(index, count)


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "2", "a/b", "-1/2", "1/2/3", ""])
def test_anything_else_is_refused_with_the_form_to_use(text: str) -> None:
    with pytest.raises(ShardError, match="I/N|between 1 and N"):
        parse_shard(text)


def test_the_shards_split_the_class_exactly_once() -> None:
    paths = [Path("subs") / name for name in NAMES]
    shards = [select(paths, Shard(i, 4)) for i in range(1, 5)]
    assert sorted(p for shard in shards for p in shard) == sorted(paths)
    assert all(50 <= len(shard) <= 100 for shard in shards), [len(s) for s in shards]


def test_a_shard_does_not_depend_on_the_order_of_the_arguments_nor_on_the_others() -> None:
    paths = [Path("/data/subs") / name for name in NAMES]
    shuffled = paths[:]
    random.Random(7).shuffle(shuffled)
    first = {p.name for p in select(paths, Shard(2, 3))}
    assert {p.name for p in select(shuffled, Shard(2, 3))} == first
    assert {p.name for p in select(paths[:150], Shard(2, 3))} == {n for n in first if n in NAMES[:150]}


def test_a_submission_is_sharded_by_its_name_not_its_folder_or_extension() -> None:
    for count in (1, 2, 7):
        index = shard_of("ada", count)
        assert select([Path("a/ada"), Path("b/ada.zip"), Path("c/ada.ipynb")], Shard(index, count)) == [
            Path("a/ada"),
            Path("b/ada.zip"),
            Path("c/ada.ipynb"),
        ]
