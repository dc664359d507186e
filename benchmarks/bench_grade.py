"""Time `grader grade` on a batch of submissions, with a sandbox per submission and without one,
side by side (targets: at most 3 s per submission on 2 cores; the sandbox at most 1.5x).

Run from the repository root:
    PYTHONPATH=. python benchmarks/bench_grade.py [--count 20] [-j 2] [--exercises N] [--rounds 1]
The batch mixes correct submissions, untouched stubs and named mistakes (the kinds the tests
grade), graded at the catalog's world sizes with the CLI's own code path, warm-up included. The
two batches alternate (--rounds), so that a change of load on the machine hits both alike. Where no
sandbox can run (no bubblewrap: a laptop, macOS), the batch without one is timed alone, and the
reason is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from grader.catalog import Catalog, load_catalog
from grader.instructor import sample_submissions as sample
from grader.instructor.batch import grade_batch
from grader.plan import GradingPlan
from grader.sandbox import SandboxError, open_sandbox

REPO = Path(__file__).resolve().parents[1]
KINDS = (
    lambda folder: sample.solutions(REPO, folder),
    lambda folder: sample.with_mistake(REPO, folder, "ex03_train_ddp.py", "loss_summed"),
    lambda folder: sample.with_mistake(REPO, folder, "ex02_data_sharding.py", "forgot_set_epoch"),
    lambda folder: sample.stubs(REPO, folder),
)


def _sandbox_problem(catalog: Catalog, out: Path) -> str | None:
    """Why `grader grade`'s default sandbox cannot run here (None: it can), asked once before timing."""
    try:
        sandbox = open_sandbox("auto", catalog.root, out)
    except SandboxError as exc:
        return str(exc)
    if sandbox is not None:
        print(f"  (sandboxed with {sandbox.name})")
        sandbox.close()
    return None


def _batch(catalog: Catalog, paths: list[Path], jobs: int, mode: str, out: Path) -> tuple[float, list[str]]:
    sandbox = open_sandbox(mode, catalog.root, out)
    started = time.monotonic()
    try:
        grades = grade_batch(catalog, paths, GradingPlan(jobs=jobs, hidden=True), sandbox)
    finally:
        if sandbox is not None:
            sandbox.close()
    return time.monotonic() - started, [g.name for g in grades if g.problem]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20, help="submissions in the batch")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--exercises", type=int, metavar="N", help="grade exercises 1..N only (default: all)")
    parser.add_argument("--rounds", type=int, default=1, help="batches of each kind, alternating")
    args = parser.parse_args()
    catalog = load_catalog(REPO)
    if args.exercises:
        catalog = dataclasses.replace(catalog, exercises=catalog.exercises[: args.exercises])
    with tempfile.TemporaryDirectory() as tmp:
        paths = [KINDS[i % len(KINDS)](Path(tmp) / f"student{i:02d}") for i in range(args.count)]
        problem = _sandbox_problem(catalog, Path(tmp))
        if problem:
            print(f"  (no sandboxed batch: {problem})")
        seconds: dict[str, list[float]] = {"none": []} if problem else {"none": [], "auto": []}
        for _ in range(args.rounds):
            for mode in seconds:
                elapsed, problems = _batch(catalog, paths, args.jobs, mode, Path(tmp))
                seconds[mode].append(elapsed)
                if problems:
                    print(f"  ({mode}: problems with {problems})")
    plain = statistics.median(seconds["none"])
    print(f"{args.count} submissions, {len(catalog.exercises)} exercises, -j {args.jobs}, median of {args.rounds}:")
    print(f"  without sandbox: {plain:6.1f}s in all, {plain / args.count:.2f}s per submission")
    if "auto" in seconds:
        boxed = statistics.median(seconds["auto"])
        print(
            f"  sandboxed:       {boxed:6.1f}s in all, {boxed / args.count:.2f}s per submission ({boxed / plain:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
