"""Knock-on survey: which checks one failing mistake costs, graded with every check (issue 31).

A mistake that makes a shared run fail (a rank raises, ranks call different collectives, a rank hangs) should cost
the checks whose facts the failure cut short, and no other: the checks whose facts were proven complete before it
are judged on them (CheckContext.facts_until_failure). For every mistake of tests/mistakes/ whose expected message
says a run failed, this grades the mistake with every check (public and hidden) and prints, per mistake, the checks
that failed with a message of their own, those that failed as knock-ons ("not judged: ..."), and how many passed.

Run from the repository root (a few minutes for the whole course):
    PYTHONPATH=. python tools/knock_on_survey.py [--exercises ex03,ex09] [--mistakes NAME,...] [--world-size 2]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "tests"):  # run as a script from anywhere: this checkout's grader and test variants
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from variants import materialize  # noqa: E402

from grader.catalog import load_catalog  # noqa: E402
from grader.engine import Engine  # noqa: E402
from grader.judge.runner import ALL_CHECKS, GradeOptions, grade_exercise  # noqa: E402

# what an expected message says when the mistake's run fails rather than its numbers
FAILED_RUN = re.compile(r"raised|different collectives|hang|timed out|stopped|died|signal|deadline", re.I)
KNOCK_ON = "not judged: "


def failing_mistakes(exercises: set[str], names: set[str]) -> Iterator[tuple[str, dict]]:
    """(exercise id, mistake) for each mistake whose run fails, among those asked for (empty: all)."""
    for spec in sorted((REPO / "tests" / "mistakes").glob("*.toml")):
        if exercises and spec.stem not in exercises:
            continue
        for mistake in tomllib.loads(spec.read_text())["mistake"]:
            if (not names or mistake["name"] in names) and FAILED_RUN.search(mistake.get("expect", "")):
                yield spec.stem, mistake


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercises", default="", help="comma-separated exercise ids (default: all)")
    parser.add_argument("--mistakes", default="", help="comma-separated mistake names (default: all that fail a run)")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    catalog = load_catalog(REPO)
    chosen = list(
        failing_mistakes(set(filter(None, args.exercises.split(","))), set(filter(None, args.mistakes.split(","))))
    )
    with Engine(preload=sorted({catalog.get(e).workers_module for e, _ in chosen})) as engine:
        for exercise_id, mistake in chosen:
            exercise = catalog.get(exercise_id)
            options = GradeOptions(world_sizes=(args.world_size,), visibilities=ALL_CHECKS, seed=args.seed)
            with tempfile.TemporaryDirectory() as folder:
                results = grade_exercise(engine, exercise, materialize(exercise.file, mistake, Path(folder)), options)
            knocked = [r.check for r in results if r.message.startswith(KNOCK_ON)]
            failed = [r.check for r in results if r.status != "passed" and r.check not in knocked]
            passed = sum(r.status == "passed" for r in results)
            print(f"{exercise_id}:{mistake['name']}: failed={failed} knocked={knocked} passed={passed}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
