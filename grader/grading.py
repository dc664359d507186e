"""Grading a submission: the one path from a folder of exercise files to results that `grader check`, the
notebook check (`grader check x.ipynb`, which `grader.notebook` runs) and `grader grade` all take.

Each exercise is graded, or said not run (and why) with zero points: its file is unusable, the backend
cannot run here, or the caller stopped grading (a batch's time limit). What is said about a notebook's
joined module is said in its cells' terms. Which engine grades is grader/grading_engines.py's; what only
a batch has (the time limit, the trusted references) stays in grader/instructor/batch.py, which passes it in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.catalog import Exercise
from grader.engine import Job, Runner
from grader.judge.api import References
from grader.judge.runner import GradeOptions, grade_exercise, not_run
from grader.judge.verdict import CheckResult
from grader.notebook_source import SourceMap


@dataclass
class ExerciseFiles:
    """A folder of exercise files (`ex01_process_group.py`, ...), with what is known of them before grading."""

    folder: Path
    problems: dict[str, str] = field(default_factory=dict)  # exercise id -> why its file is unusable
    source_maps: dict[str, SourceMap] = field(default_factory=dict)  # exercise id -> its notebook's cells

    def problem(self, exercise: Exercise) -> str | None:
        """Why the exercise's file cannot be graded, known before any check runs; None: its checks say."""
        return self.problems.get(exercise.id)


class BackendProbe:
    """Why the requested backend cannot run here (NCCL without enough GPUs), asked of a rank once.

    Shared by `grader check` and `grader grade` (whose threads may ask at the same time).
    """

    def __init__(self, backend: str, nodes: int = 1) -> None:
        self.backend = backend
        self.nodes = nodes  # the ranks are spread over this many nodes alike (torchrun cluster)
        self._lock = threading.Lock()
        self._facts: dict | None = None

    def problem(self, engine: Runner, world_sizes: Sequence[int]) -> str | None:
        if self.backend != "nccl":
            return None
        with self._lock:
            if self._facts is None:
                self._facts = engine.run(Job("grader.engine.probe:accelerators", 1)).ranks[0].facts
        if not self._facts.get("nccl"):
            return "this torch build has no NCCL"
        gpus, needed = int(self._facts.get("gpus", 0)), -(-max(world_sizes) // self.nodes)
        if gpus < needed:
            per_node = " per node" if self.nodes > 1 else ""
            return f"nccl needs one GPU per rank: {needed} wanted{per_node}, {gpus} visible"
        return None


def grade_files(
    files: ExerciseFiles,
    exercises: Sequence[Exercise],
    engine: Runner,
    probe: BackendProbe,
    options: GradeOptions,
    on_result: Callable[[CheckResult], None] | None = None,
    *,
    probe_engine: Runner | None = None,
    references: References | None = None,
    stopped: Callable[[], str | None] | None = None,
) -> list[CheckResult]:
    """Every exercise's results, each also passed to `on_result` as it comes. The probe asks `probe_engine`
    (default: `engine`; a batch asks its trusted one); `references` run the trusted references (default: on
    `engine`); `stopped` says why no further exercise may start, if none may."""
    results: list[CheckResult] = []

    def emit(result: CheckResult) -> None:
        results.append(result)
        if on_result:
            on_result(result)

    for exercise in exercises:
        sizes = options.world_sizes or tuple(w for c in exercise.checks for w in c.world_sizes)
        if (file_problem := files.problem(exercise)) is not None:
            not_graded = not_run(exercise, options, "error", file_problem)
        elif (backend_problem := probe.problem(probe_engine or engine, sizes)) is not None:
            # Gradescope has no "skipped": there these become failed tests with 0 points and the reason
            not_graded = not_run(exercise, options, "skipped", backend_problem)
        elif stopped is not None and (why := stopped()) is not None:
            not_graded = not_run(exercise, options, "failed", why)
        else:
            located = _located(emit, files.source_maps.get(exercise.id))
            grade_exercise(engine, exercise, files.folder / exercise.file, options, located, references)
            not_graded = []
        for result in not_graded:
            emit(result)
    return results


def _located(emit: Callable[[CheckResult], None], source_map: SourceMap | None) -> Callable[[CheckResult], None]:
    """`emit`, given what is said about a notebook's joined module in the notebook's cells' terms."""
    return emit if source_map is None else lambda result: emit(source_map.apply(result))
