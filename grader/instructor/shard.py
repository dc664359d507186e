"""`--shard I/N`: which submissions the I-th of N graders takes, decided from the names alone.

A submission's shard is a hash of its name (the name its results folder and gradebook row get), so
every array task of a cluster job picks the same slices whatever order its shell listed the files
in, and a submission added late lands in one shard without moving any other. Counts per shard
vary a little (it is a hash, not a deal); each submission is bounded by its own time limit anyway.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.instructor.submissions import name_of

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardError(Exception):
    """A `--shard` value that is not I/N with 1 <= I <= N."""


@dataclass(frozen=True)
class Shard:
    index: int  # 1 .. count
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, name: str) -> bool:
        return shard_of(name, self.count) == self.index


def parse_shard(text: str) -> Shard:
    match = _SPEC.match(text)
    if not match:
        raise ShardError(f"--shard {text!r}: write it as I/N, e.g. 2/8 for the second of eight slices")
    index, count = int(match[1]), int(match[2])
    if count < 1 or not 1 <= index <= count:
        raise ShardError(f"--shard {text}: I must be between 1 and N (N at least 1)")
    return Shard(index, count)


def shard_of(name: str, count: int) -> int:
    """The shard (1 .. count) that grades the submission called `name`."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()  # a name that is not UTF-8 too
    return int.from_bytes(digest[:8], "big") % count + 1


def select(paths: Sequence[Path], shard: Shard) -> list[Path]:
    """The paths this shard grades, in the order given."""
    return [path for path in paths if shard.holds(name_of(path))]
