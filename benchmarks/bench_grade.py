"""Time `grader grade` on a batch of submissions (target: at most 3 s per submission on 2 cores).

Run from the repository root:  PYTHONPATH=. python benchmarks/bench_grade.py [--count 20] [-j 2] [--exercises N]
The batch mixes correct submissions, untouched stubs and named mistakes (the kinds the tests
grade), graded at the catalog's world sizes with the CLI's own code path, warm-up included.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from grader.catalog import load_catalog
from grader.checks.runner import ALL_CHECKS
from grader.instructor.batch import BatchOptions, grade_batch
from tests.instructor import support

KINDS = (
    lambda folder: support.solutions(folder),
    lambda folder: support.with_mistake(folder, "ex03_train_ddp.py", "loss_summed"),
    lambda folder: support.with_mistake(folder, "ex02_data_sharding.py", "forgot_set_epoch"),
    lambda folder: support.stubs(folder),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20, help="submissions in the batch")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--exercises", type=int, metavar="N", help="grade exercises 1..N only (default: all)")
    args = parser.parse_args()
    catalog = load_catalog(support.REPO)
    if args.exercises:
        catalog = dataclasses.replace(catalog, exercises=catalog.exercises[: args.exercises])
    with tempfile.TemporaryDirectory() as tmp:
        paths = [KINDS[i % len(KINDS)](Path(tmp) / f"student{i:02d}") for i in range(args.count)]
        started = time.monotonic()
        grades = grade_batch(catalog, paths, BatchOptions(jobs=args.jobs, visibilities=ALL_CHECKS))
        seconds = time.monotonic() - started
    problems = [g.name for g in grades if g.problem]
    print(f"{len(grades)} submissions, {len(catalog.exercises)} exercises, -j {args.jobs}: {seconds:.1f}s in all, "
          f"{seconds / len(grades):.2f}s per submission" + (f" (problems: {problems})" if problems else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
