"""Which engine a grading runs on: chosen and made here only, from the plan and the context.

`grader check` and `watch` grade on one engine (`open_check`): torchrun's (this machine, or node 0 of a
cluster), else a zygote the warm daemon kept (grader/warm.py) where the context allows it, else a fresh
launcher (fork or portable, as the plan asks or the platform prefers). `grader grade` (`open_batch`) lends
each submission an engine of its own: a fresh sandbox each, or, without one (trusted code), warm engines
reused from one submission to the next; the trusted references run on a further engine that never loads
student code. One place, so a launcher, a preload or a sandbox is honoured alike by every command.
"""

from __future__ import annotations

import queue
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from grader import private_network, warm
from grader.catalog import Exercise
from grader.engine import Engine, open_engine
from grader.engine.cluster import Cluster
from grader.engine.torchrun_launch import TorchrunEngine
from grader.grading import BackendProbe, ExerciseFiles, grade_files
from grader.judge.runner import ENGINE_FAILURE
from grader.judge.verdict import CheckResult
from grader.plan import GradingPlan
from grader.report.sink import Sink

if TYPE_CHECKING:  # the sandbox is the instructor's: a student's check never imports it
    from grader.sandbox import SandboxSet


@dataclass(frozen=True)
class EngineContext:
    """Where a grading runs, beside the plan's what: known to the command, not to the options."""

    preload: tuple[str, ...]  # the exercises' workers modules, imported before any rank runs
    warm: bool = False  # a student's check may take the warm daemon's zygote (not --no-warm, never `watch`)
    cluster: Cluster | None = None  # torchrun over several nodes, this one node 0
    sandbox: SandboxSet | None = None  # a batch: each submission in a fresh sandbox; None: trusted code only


class CheckGrading:
    """One engine shared by every exercise one student command grades; closed with it."""

    def __init__(self, plan: GradingPlan, engine: Engine | TorchrunEngine, note: str = "") -> None:
        self.plan = plan
        self.engine = engine
        self.note = note  # how the engine was had (the warm daemon's zygote, or why not): said with -v
        cluster = engine.cluster if isinstance(engine, TorchrunEngine) else None
        self._probe = BackendProbe(plan.backend, cluster.nnodes if cluster else 1)

    def __enter__(self) -> CheckGrading:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.engine.close()

    def grade(
        self,
        files: ExerciseFiles,
        exercises: Sequence[Exercise],
        on_result: Callable[[CheckResult], None] | None = None,
    ) -> list[CheckResult]:
        return grade_files(files, exercises, self.engine, self._probe, self.plan.grade_options(), on_result)


class Grades(Protocol):
    """What grades exercise files: a `CheckGrading` (a test may stand in for it)."""

    def grade(
        self, files: ExerciseFiles, exercises: Sequence[Exercise], on_result: Callable[[CheckResult], None]
    ) -> list[CheckResult]: ...


def grade_into(
    grading: Grades, files: ExerciseFiles, exercises: Sequence[Exercise], sinks: Sequence[Sink[CheckResult]]
) -> list[CheckResult]:
    """Grade exercise by exercise, each result to every sink as it comes; the sinks are closed once all are
    graded (an interrupted check owes no summary, and records nothing)."""
    results: list[CheckResult] = []

    def to_sinks(result: CheckResult) -> None:
        for sink in sinks:
            sink.on_result(result)

    for exercise in exercises:
        for sink in sinks:
            sink.on_start(exercise.id)
        results += grading.grade(files, [exercise], to_sinks)
    for sink in sinks:
        sink.close()
    return results


def open_check(plan: GradingPlan, context: EngineContext) -> CheckGrading:
    """The engine of a student's check, started: it warms up while the caller goes on."""
    if plan.launcher == "torchrun":
        engine: Engine | TorchrunEngine = TorchrunEngine(cluster=context.cluster)
        engine.start()
        return CheckGrading(plan, engine)
    note = ""
    if context.warm and warm.enabled():
        adopted, note = warm.warm_engine(list(context.preload), plan.launcher)
        if adopted is not None:
            adopted.start()
            return CheckGrading(plan, adopted, note)
    return CheckGrading(
        plan, open_engine(context.preload, plan.launcher, private_network.for_check(plan.launcher)), note
    )


@dataclass
class Lease:
    """An engine lent to one submission, and where that submission's files must go for it."""

    engine: Engine
    workspace: Path | None = None  # in a sandbox: the only folder of the grader's it can see

    def place(self, files: Path) -> Path:
        """`files` holds only regular files that `submissions.prepare` wrote; a link (there is none) would be
        copied as a link, never followed."""
        if self.workspace is None:
            return files
        return Path(shutil.copytree(files, self.workspace / "files", symlinks=True))


class EngineLender(Protocol):
    """Engines lent to one submission at a time."""

    def borrow(self) -> Lease: ...

    def give_back(self, lease: Lease, results: Sequence[CheckResult]) -> None: ...

    def close(self) -> None: ...


def _engine_failed(results: Sequence[CheckResult]) -> bool:
    return any(r.engine_failed for r in results)


class _EnginePool:
    """Without a sandbox: warm engines lent to one submission at a time; one that broke is
    replaced, never lent again."""

    def __init__(self, size: int, preload: Sequence[str], launcher: str | None) -> None:
        self._preload = preload
        self._launcher = launcher
        self._idle: queue.Queue[Engine] = queue.Queue()
        self._all: list[Engine] = []
        for _ in range(size):
            self._idle.put(self._new())

    def _new(self) -> Engine:
        engine = open_engine(self._preload, self._launcher)
        self._all.append(engine)
        return engine

    def borrow(self) -> Lease:
        return Lease(self._idle.get())

    def give_back(self, lease: Lease, results: Sequence[CheckResult]) -> None:
        """A zygote that died (a student may kill its parent) fails every later run: replace it."""
        engine = lease.engine
        if _engine_failed(results):
            engine.close()
            engine = self._new()
        self._idle.put(engine)

    def close(self) -> None:
        for engine in self._all:
            engine.close()


class _SandboxPool:
    """A fresh sandbox per submission, `size` of them warming ahead. One long-lived thread starts
    them: a sandbox dies with the thread that started it (bubblewrap's --die-with-parent)."""

    def __init__(self, size: int, sandbox: SandboxSet, preload: Sequence[str]) -> None:
        self._sandbox = sandbox
        self._preload = preload
        self._ready: queue.Queue[Lease | BaseException] = queue.Queue()
        self._wanted: queue.Queue[bool] = queue.Queue()
        for _ in range(size):
            self._wanted.put(True)
        self._starter = threading.Thread(target=self._start_loop, name="sandbox-starter", daemon=True)
        self._starter.start()

    def _start_loop(self) -> None:
        while self._wanted.get():
            try:
                workspace = Path(tempfile.mkdtemp(prefix="grader-workspace-"))
                engine = open_engine(self._preload, confinement=self._sandbox.confine(workspace))
                self._ready.put(Lease(engine, workspace))
            except Exception as exc:  # reported by the submission that needed this sandbox
                self._ready.put(exc)

    def borrow(self) -> Lease:
        self._wanted.put(True)
        lease = self._ready.get()
        if isinstance(lease, BaseException):
            raise RuntimeError(f"{ENGINE_FAILURE}: could not start a sandbox: {lease}") from lease
        return lease

    def give_back(self, lease: Lease, results: Sequence[CheckResult]) -> None:
        """Used once: the sandbox is torn down, with everything the submission left in it."""
        lease.engine.close()
        if lease.workspace is not None:
            shutil.rmtree(lease.workspace, ignore_errors=True)

    def close(self) -> None:
        self._wanted.put(False)
        self._starter.join()
        while not self._ready.empty():
            lease = self._ready.get()
            if isinstance(lease, Lease):
                self.give_back(lease, [])


@dataclass
class BatchEngines:
    """A batch's engines: `trusted` for the references and the backend probe (never loads student code),
    `lender` for the submissions."""

    trusted: Engine
    lender: EngineLender

    def close(self) -> None:
        self.lender.close()
        self.trusted.close()


def open_batch(plan: GradingPlan, context: EngineContext, size: int) -> BatchEngines:
    """The engines of a batch graded `size` submissions at a time; the caller closes them."""
    trusted = open_engine(context.preload, plan.launcher)
    lender: EngineLender = (
        _SandboxPool(size, context.sandbox, context.preload)
        if context.sandbox is not None
        else _EnginePool(size, context.preload, plan.launcher)
    )
    return BatchEngines(trusted, lender)
