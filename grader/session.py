"""One grading session: a warm engine shared by every exercise graded in one command."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from grader.catalog import Catalog, Exercise
from grader.checks.runner import CheckResult, GradeOptions, grade_exercise, not_run
from grader.engine import Engine, Job
from grader.engine.torchrun_launch import TorchrunEngine


class GradingSession:
    def __init__(self, catalog: Catalog, options: GradeOptions, engine: Engine | TorchrunEngine | None = None) -> None:
        self.catalog = catalog
        self.options = options
        self.engine = engine or Engine(preload=[e.workers_module for e in catalog.exercises])
        self.engine.start()  # warms up while the caller parses and validates
        self._skip_reason: str | None = None
        self._probed = False

    def __enter__(self) -> GradingSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.engine.close()

    def _backend_problem(self, world_sizes: Sequence[int]) -> str | None:
        """Why the requested backend cannot run here (NCCL without enough GPUs), or None."""
        if self.options.backend != "nccl":
            return None
        if not self._probed:
            facts = self.engine.run(Job("grader.engine.probe:accelerators", 1)).ranks[0].facts
            self._probed = True
            self._gpus = int(facts.get("gpus", 0))
            if not facts.get("nccl"):
                self._skip_reason = "this torch build has no NCCL"
        needed = max(world_sizes)
        if self._skip_reason is None and self._gpus < needed:
            return f"nccl needs one GPU per rank: {needed} wanted, {self._gpus} visible"
        return self._skip_reason

    def grade(
        self,
        exercise: Exercise,
        path: Path,
        on_result: Callable[[CheckResult], None] | None = None,
    ) -> list[CheckResult]:
        sizes = self.options.world_sizes or tuple(w for c in exercise.checks for w in c.world_sizes)
        problem = self._backend_problem(sizes)
        if problem is not None:
            results = not_run(exercise, self.options, "skipped", problem)
            for result in results:
                if on_result:
                    on_result(result)
            return results
        return grade_exercise(self.engine, exercise, path, self.options, on_result)
