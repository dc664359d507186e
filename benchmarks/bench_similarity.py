"""Time `grader similarity` on a simulated class (target: 300 submissions in under 2 minutes on 2 cores).

Run from the repository root:  PYTHONPATH=. python benchmarks/bench_similarity.py [--count 300] [--seed 0]
Each submission's file of each exercise is drawn from what a class hands in: the reference solution, one of
the course's correct alternatives (tests/alternatives/), the solution with one of its named mistakes
(tests/mistakes/), a disguised copy of the solution (names renamed, functions reordered), or the untouched
stub; each file ends with a comment naming its student, so no two files are the same text (as in a class). The
batch is timed as the command line runs it (one process per CPU), in a fresh interpreter, copydetect's import
included, into a results folder holding the batch.json `grader grade` writes; nothing is graded. The CPU time
of all its processes is printed too: on a machine busy with other work the wall time says little.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from grader.catalog import Exercise, load_catalog
from grader.instructor import manifest
from grader.instructor.sample_submissions import disguised

REPO = Path(__file__).resolve().parents[1]
KINDS = {"solution": 2, "alternative": 4, "mistake": 3, "disguised": 1, "stub": 1}  # relative weights


def _variant(exercise: Exercise, variant: dict, alternatives: list[dict]) -> str:
    """A variant of tests/alternatives/ or tests/mistakes/ as tests/variants.py makes it: a whole file, or patches
    of the solution (or of the alternative it names as its `base`)."""
    if "source" in variant:
        return str(variant["source"])
    if "base" in variant:
        source = _variant(exercise, next(a for a in alternatives if a["name"] == variant["base"]), alternatives)
    else:
        source = (REPO / "solutions" / exercise.file).read_text()
    for old, new in variant.get("replace", []):
        source = source.replace(old, new, 1)
    return source


def _kinds(exercise: Exercise) -> dict[str, list[str]]:
    """Every file of each kind a student may hand in for the exercise."""
    stem = Path(exercise.file).stem
    alternatives = tomllib.loads((REPO / "tests" / "alternatives" / f"{stem}.toml").read_text()).get("alternative", [])
    mistakes = tomllib.loads((REPO / "tests" / "mistakes" / f"{stem}.toml").read_text()).get("mistake", [])
    solution = (REPO / "solutions" / exercise.file).read_text()
    return {
        "solution": [solution],
        "alternative": [_variant(exercise, a, alternatives) for a in alternatives] or [solution],
        "mistake": [_variant(exercise, m, alternatives) for m in mistakes] or [solution],
        "disguised": [disguised(solution, exercise.function_names)],
        "stub": [(REPO / "exercises" / exercise.file).read_text()],
    }


def simulate(root: Path, count: int, seed: int) -> list[Path]:
    catalog = load_catalog(REPO)
    files = {e.file: _kinds(e) for e in catalog.exercises}
    draw = random.Random(seed)
    paths = []
    for index in range(count):
        folder = root / f"student{index:03d}"
        folder.mkdir(parents=True)
        for name, kinds in files.items():
            kind = draw.choices(list(KINDS), weights=list(KINDS.values()))[0]
            (folder / name).write_text(f"{draw.choice(kinds[kind])}\n# {folder.name}\n")
        paths.append(folder)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="submissions in the class")
    parser.add_argument("--seed", type=int, default=0, help="which class is drawn")
    args = parser.parse_args()
    catalog = load_catalog(REPO)
    with tempfile.TemporaryDirectory() as tmp:
        paths = simulate(Path(tmp) / "submissions", args.count, args.seed)
        out = Path(tmp) / "graded"
        names = tuple(p.name for p in paths)
        manifest.Manifest(names, tuple(e.id for e in catalog.exercises)).write(out / manifest.FILENAME)
        started, cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [sys.executable, "-m", "grader", "similarity", str(out), *map(str, paths)],
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - started
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_seconds = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        pages = len(list((out / "similarity" / "pairs").iterdir()))
        print(done.stdout.strip())
        print(
            f"grader similarity: {args.count} submissions x {len(catalog.exercises)} exercises in {seconds:.1f}s, "
            f"{cpu_seconds:.1f}s of CPU in all processes, {pages} pair pages (target: under 120 s on 2 cores; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
