"""One grading session: a warm engine shared by every exercise graded in one command."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from grader.catalog import Catalog, Exercise
from grader.checks.runner import CheckResult, GradeOptions, grade_exercise, not_run
from grader.engine import Engine, Job, Runner, open_engine
from grader.engine.platforms import LAUNCHERS
from grader.engine.torchrun_launch import TorchrunEngine


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


class GradingSession:
    """`engine` None: a warm engine of `launcher` ("fork" or "portable"; else the platform's)."""

    def __init__(self, catalog: Catalog, options: GradeOptions, engine: Engine | TorchrunEngine | None = None,
                 launcher: str | None = None) -> None:
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
        exercise: Exercise,
        path: Path,
        on_result: Callable[[CheckResult], None] | None = None,
    ) -> list[CheckResult]:
        sizes = self.options.world_sizes or tuple(w for c in exercise.checks for w in c.world_sizes)
        problem = self._probe.problem(self.engine, sizes)
        if problem is not None:
            results = not_run(exercise, self.options, "skipped", problem)
            for result in results:
                if on_result:
                    on_result(result)
            return results
        return grade_exercise(self.engine, exercise, path, self.options, on_result)
