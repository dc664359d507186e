"""What one `grader grade` run was asked to grade (`OUT/batch.json`), written before it starts.

A shard that dies half-way leaves a gradebook with rows missing and nothing to say which; the
manifest lists every submission the run took on (and its shard), so `grader gradebook merge` can
name the submissions and shards that never came back. It also records what `grader regrade` needs to grade
the same submissions the same way: the batch's seed, its options, the submissions' paths, and the provenance
of its grades (grader/instructor/provenance.py). A batch.json of an older grader lacks those: it is still read
(they are None), and regrade says what is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.instructor.provenance import Provenance
from grader.instructor.shard import Shard

FILENAME = "batch.json"


class ManifestError(Exception):
    """A batch.json that cannot be read back."""


@dataclass(frozen=True)
class BatchOptions:
    """The options of `grader grade` that decide a grade, as given (`--out` and the shard apart)."""

    paths: tuple[str, ...]  # every submission named on the command line, absolute, in the order given
    world_size: int | None
    deadline: float
    timeout: float
    jobs: int
    backend: str
    sandbox: str
    hidden_visibility: str
    launcher: str | None
    roster: str | None  # absolute

    def to_json(self) -> dict[str, Any]:
        return {
            "paths": list(self.paths),
            "world_size": self.world_size,
            "deadline": self.deadline,
            "timeout": self.timeout,
            "jobs": self.jobs,
            "backend": self.backend,
            "sandbox": self.sandbox,
            "hidden_visibility": self.hidden_visibility,
            "launcher": self.launcher,
            "roster": self.roster,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchOptions:
        world_size, launcher, roster = data["world_size"], data["launcher"], data["roster"]
        return cls(
            tuple(map(str, data["paths"])),
            None if world_size is None else int(world_size),
            float(data["deadline"]),
            float(data["timeout"]),
            int(data["jobs"]),
            str(data["backend"]),
            str(data["sandbox"]),
            str(data["hidden_visibility"]),
            None if launcher is None else str(launcher),
            None if roster is None else str(roster),
        )


@dataclass(frozen=True)
class Manifest:
    submissions: tuple[str, ...]  # every submission named on the command line, this shard's or not
    exercises: tuple[str, ...]
    shard: Shard | None = None
    seed: int | None = None  # the batch's one seed (None: an older grader's batch.json)
    options: BatchOptions | None = None
    provenance: Provenance | None = None

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
            "seed": self.seed,
            "options": None if self.options is None else self.options.to_json(),
            "provenance": None if self.provenance is None else self.provenance.to_json(),
        }
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def read_manifest(path: Path) -> Manifest:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        shard, seed = data["shard"], data.get("seed")
        options, provenance = data.get("options"), data.get("provenance")
        if isinstance(seed, bool) or not isinstance(seed, int | None):
            raise ValueError(f"seed {seed!r} is not a whole number")
        return Manifest(
            tuple(map(str, data["submissions"])),
            tuple(map(str, data["exercises"])),
            None if shard is None else Shard(int(shard["index"]), int(shard["count"])),
            seed,
            None if options is None else BatchOptions.from_json(options),
            None if provenance is None else Provenance.from_json(provenance),
        )
    except OSError as exc:
        raise ManifestError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{path}: not a batch.json written by `grader grade` ({exc})") from exc
