"""What one `grader grade` run was asked to grade (`OUT/batch.json`), written before it starts.

A shard that dies half-way leaves a gradebook with rows missing and nothing to say which; the
manifest lists every submission the run took on (and its shard), so `grader gradebook merge` can
name the submissions and shards that never came back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from grader.instructor.shard import Shard

FILENAME = "batch.json"


class ManifestError(Exception):
    """A batch.json that cannot be read back."""


@dataclass(frozen=True)
class Manifest:
    submissions: tuple[str, ...]  # every submission named on the command line, this shard's or not
    exercises: tuple[str, ...]
    shard: Shard | None = None

    @property
    def graded(self) -> tuple[str, ...]:
        """The submissions this run grades itself."""
        return tuple(n for n in self.submissions if self.shard is None or self.shard.holds(n))

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "submissions": list(self.submissions),
            "exercises": list(self.exercises),
            "shard": None if self.shard is None else {"index": self.shard.index, "count": self.shard.count},
        }
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def read_manifest(path: Path) -> Manifest:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        shard = data["shard"]
        return Manifest(
            tuple(map(str, data["submissions"])),
            tuple(map(str, data["exercises"])),
            None if shard is None else Shard(int(shard["index"]), int(shard["count"])),
        )
    except OSError as exc:
        raise ManifestError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{path}: not a batch.json written by `grader grade` ({exc})") from exc
