"""Shared fixtures: one warm engine per test process (pytest-xdist gives each worker its own),
the catalog, `grade`, the thin adapter between a file on disk and the checks, and `bwrap_available`
for the tests of the sandbox."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from grader.catalog import Catalog, load_catalog
from grader.engine import Engine
from grader.judge.api import DEFAULT_DEADLINE_S
from grader.judge.runner import ALL_CHECKS, CheckResult, GradeOptions, grade_exercise

REPO = Path(__file__).resolve().parent.parent

Grade = Callable[..., list[CheckResult]]
# GRADER_TEST_SEED=N grades every test with the inputs of seed N (a failure seen once, replayed);
# unset, each grading draws its own, as `grader check` does.
SEED = int(os.environ["GRADER_TEST_SEED"]) if os.environ.get("GRADER_TEST_SEED") else None
# `grader check` in a test starts no warm daemon (tests/test_warm.py turns it on, in a folder of its own).
os.environ["GRADER_WARM"] = "0"


@pytest.fixture(scope="session")
def bwrap_available() -> None:
    """For tests of `grader grade`'s sandbox: skipped with the reason where bubblewrap cannot run (a
    laptop without it, macOS), so the suite is green on a fresh machine; failed under CI, where
    .ci/run installs it, so the sandbox is never untested there by accident. The unprivileged-user
    fallback does not count: it needs root, so a test that passed only through it would fail on a
    contributor's laptop."""
    from grader.sandbox import bubblewrap  # here, not at the top: most test processes never need it

    problem = bubblewrap.unavailable()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the sandbox tests must run under CI: {problem}")
    pytest.skip(problem)


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(REPO)


@pytest.fixture(scope="session")
def engine(catalog: Catalog) -> Iterator[Engine]:
    with Engine(preload=[e.workers_module for e in catalog.exercises]) as warm:
        yield warm


@pytest.fixture(scope="session")
def grade(engine: Engine, catalog: Catalog) -> Grade:
    def run(
        exercise_id: str,
        path: Path,
        world_sizes: tuple[int, ...] | None = None,
        deadline: float = DEFAULT_DEADLINE_S,
        checks: set[str] | None = None,
        seed: int | None = SEED,
    ) -> list[CheckResult]:
        exercise = catalog.get(exercise_id)
        only = frozenset(checks) if checks is not None else None
        if seed is None:
            seed = secrets.randbelow(2**31)
        print(f"graded {exercise_id} with GRADER_TEST_SEED={seed}")  # shown with a failure, to replay it
        options = GradeOptions(
            world_sizes=world_sizes, deadline=deadline, only=only, visibilities=ALL_CHECKS, seed=seed
        )
        return grade_exercise(engine, exercise, path, options)

    return run


def describe(results: list[CheckResult]) -> str:
    return "\n".join(f"{r.check}[W={r.world_size}] {r.status}: {r.message}\n{r.details[:2000]}" for r in results)
