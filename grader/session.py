"""One grading session: a warm engine shared by every exercise graded in one command."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from grader.catalog import Catalog, Exercise
from grader.engine import Engine, open_engine
from grader.engine.platforms import LAUNCHERS
from grader.engine.torchrun_launch import TorchrunEngine
from grader.grading import BackendProbe, ExerciseFiles, grade_files
from grader.judge.runner import GradeOptions
from grader.judge.verdict import CheckResult


class GradingSession:
    """`engine` None: a warm engine of `launcher` ("fork" or "portable"; else the platform's)."""

    def __init__(
        self,
        catalog: Catalog,
        options: GradeOptions,
        engine: Engine | TorchrunEngine | None = None,
        launcher: str | None = None,
    ) -> None:
        self.catalog = catalog
        self.options = options
        if engine is None:  # started: it warms up while the caller parses and validates
            preload = [e.workers_module for e in catalog.exercises]
            engine = open_engine(preload, launcher if launcher in LAUNCHERS else None)
        else:
            engine.start()
        self.engine = engine
        cluster = self.engine.cluster if isinstance(self.engine, TorchrunEngine) else None
        self._probe = BackendProbe(options.backend, cluster.nnodes if cluster else 1)

    def __enter__(self) -> GradingSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.engine.close()

    def grade(
        self,
        files: ExerciseFiles,
        exercises: Sequence[Exercise],
        on_result: Callable[[CheckResult], None] | None = None,
    ) -> list[CheckResult]:
        return grade_files(files, exercises, self.engine, self._probe, self.options, on_result)
