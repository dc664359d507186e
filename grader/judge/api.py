"""What a check author writes against: `@check`, `CheckContext`, `Verdict` (from grader/judge/verdict.py).

A check is a function in the grader's own process. It starts ranks through the context, gets
back raw facts, and decides. Ranks never decide anything. Failing is done by raising
`CheckFailed` (via `ctx.fail`), so a check reads as a list of claims.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast, overload

from grader.catalog import Exercise
from grader.engine import DEFAULT_DEADLINE_S, Job, Runner, RunResult
from grader.engine.facts import ReplayedStep, TrainingReplays, Worker
from grader.judge.diagnose import NOT_IMPLEMENTED, failure_verdict
from grader.judge.facts import problems as facts_problems
from grader.judge.names import HintName
from grader.judge.proof import Proven
from grader.judge.replay import Replayer
from grader.judge.verdict import Verdict


class CheckFailed(Exception):
    """`failed_run`: the run of the student's code whose failure is the verdict (`require`), where several checks
    sharing that run would otherwise each say the same failure (the runner makes the later ones point back).
    `explains`: a failed run this verdict diagnoses in words of its own (never turned into a pointer)."""

    def __init__(
        self, verdict: Verdict, failed_run: RunResult | None = None, explains: RunResult | None = None
    ) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict
        self.failed_run = failed_run
        self.explains = explains


class UpToFailure(dict[str, Any]):
    """A failed rank's facts, cut to those a proof showed complete before the failure: reading any other one
    fails the check with the run's failure, so a fact the failure cut short is never judged."""

    def __init__(self, facts: dict[str, Any], failure: CheckFailed) -> None:
        super().__init__(facts)
        self._failure = failure

    def __missing__(self, key: str) -> Any:
        raise self._failure

    def get(self, key: str, default: Any = None) -> Any:
        return self[key]


CheckFunction = Callable[["CheckContext"], "Verdict | str | None"]
F = TypeVar("F")
_REGISTRY: dict[str, dict[str, CheckFunction]] = {}


def check(name: str) -> Callable[[CheckFunction], CheckFunction]:
    """Register a check under the name the catalog uses for it."""

    def register(function: CheckFunction) -> CheckFunction:
        _REGISTRY.setdefault(function.__module__, {})[name] = function
        return function

    return register


def checks_in(module_name: str) -> dict[str, CheckFunction]:
    return dict(_REGISTRY.get(module_name, {}))


class References:
    """Runs trusted references, each once for as long as this object lives.

    A reference depends on its job alone (never on anything a student's rank wrote), so one
    result serves every grading that asks for it; the lock lets the threads of a batch share it.
    In a sandboxed batch the engine here is a separate one that never loads student code.
    """

    def __init__(self, engine: Runner) -> None:
        self._engine = engine
        self._results: dict[str, RunResult] = {}
        self._lock = threading.Lock()

    def run(self, job: Job) -> RunResult:
        key = repr(job)
        with self._lock:
            if key not in self._results:
                self._results[key] = self._engine.run(job)
            return self._results[key]


@dataclass(frozen=True)
class Hang:
    """A run of a grading in which a rank was stopped at its deadline: which check, at which W, said how."""

    check: str
    world_size: int
    verdict: Verdict


class RunCache:
    """Runs each identical job once per grading of an exercise, and pays for a hang once.

    Several checks judge different claims about the same run (ranks in sync, equal to the
    reference, checkpoint written once); running it once keeps `grader check` fast.

    Once a run of the student's code hangs (a rank stopped at the deadline), a later check that
    would run the same worker on the same student file and backend fails at once with "the same
    hang", without starting ranks: a hanging launcher then costs one deadline, not one per check
    and world size. The world size and the kwargs (drawn inputs, delays, sizes) are not part of
    that rule: they are inputs of the same kind to the same code, which waited at a line that does
    not depend on them as far as anyone can tell without paying another deadline, and the message
    says the check was not run, so it claims nothing that was not measured. The worker is: another
    worker drives the student's code another way (ex04's failing rank makes a join raise where
    healthy ranks leave it waiting), so its checks still run. Deterministic: it depends only on the
    order of the checks and on which run hung.
    """

    def __init__(self, engine: Runner, references: References | None = None) -> None:
        self._engine = engine
        self._references = references or References(engine)
        self._results: dict[str, RunResult] = {}
        self._hangs: dict[tuple[str, str, str], Hang] = {}
        self._scratch = ""

    @property
    def scratch(self) -> str:
        """A folder the ranks of this grading share (files one run leaves for another), as the
        ranks see it: it may be inside a sandbox, so the grader itself never opens it."""
        if not self._scratch:
            self._scratch = self._engine.new_scratch()
        return self._scratch

    def close(self) -> None:
        if self._scratch:
            self._engine.discard_scratch(self._scratch)
            self._scratch = ""

    @staticmethod
    def _hang_key(job: Job) -> tuple[str, str, str] | None:
        """What makes two runs "the same code run the same way" (class docstring); None for trusted
        runs, which never load the student's code."""
        if job.student_file is None:
            return None
        return job.target, str(job.student_file.resolve()), job.backend

    def run(self, job: Job, by: tuple[str, int] = ("", 0)) -> RunResult:
        """The job's result; `by`: the check and world size asking, named in "the same hang" and
        recorded when this run hangs. Raises CheckFailed instead of running a job that would hang."""
        key, hang_key = repr(job), self._hang_key(job)
        hang = self._hangs.get(hang_key) if hang_key else None
        if hang is not None and (hang.check, hang.world_size) != by:
            raise CheckFailed(
                replace(
                    hang.verdict,
                    message=f"the same hang as in check {hang.check} (W={hang.world_size}), so not run again: "
                    f"{hang.verdict.message}",
                )
            )
        if key not in self._results:
            self._results[key] = self._engine.run(job)
            result = self._results[key]
            if hang_key and by[0] and any(rank.stopped == "deadline" for rank in result.ranks):
                verdict = failure_verdict(result, job.student_file)
                if verdict is not None:
                    self._hangs.setdefault(hang_key, Hang(*by, verdict))
        return self._results[key]

    def explain_hang(self, by: tuple[str, int], verdict: Verdict) -> None:
        """Say a hang, in later checks, as the check that met it said it (a check may know more than
        failure_verdict: "deadlock: every rank waits in send", say)."""
        for key, hang in self._hangs.items():
            if (hang.check, hang.world_size) == by and verdict.status == "failed":
                self._hangs[key] = Hang(*by, replace(verdict))

    def reference(self, job: Job) -> RunResult:
        return self._references.run(job)


@dataclass
class CheckContext:
    runs: RunCache
    exercise: Exercise
    student_file: Path
    world_size: int
    backend: str = "gloo"
    deadline: float = DEFAULT_DEADLINE_S
    seed: int = 0  # drawn per grading: inputs derived from it cannot be answered from a table
    check: str = ""  # the check's name, for "the same hang as in check <name>" (RunCache)
    notes: list[str] = field(default_factory=list)
    used: list[RunResult] = field(default_factory=list)  # the runs this check looked at
    # failed runs this check judged on facts proven complete before the failure, and how each failed (`judged_before`)
    judged_before_failure: list[tuple[RunResult, Verdict]] = field(default_factory=list)

    @property
    def scratch(self) -> Path:
        """Where ranks may leave files for later runs of this grading (a path as the ranks see it)."""
        return Path(self.runs.scratch)

    def draw(self, purpose: str) -> random.Random:
        """A generator for one kind of input (a sampler's seed, the values to all-reduce...), drawn
        from the grading's seed: the ranks and the reference of one grading get the same inputs,
        another grading other ones, so no answer recorded from one grading passes another."""
        return random.Random(f"{self.seed}:{purpose}")

    def seeds(self, *inputs: str) -> dict[str, int]:
        """{"<input>_seed": n} for each named input ("data", "model"...): job arguments from which a
        worker builds its tensors, the same for the ranks and for the reference."""
        return {f"{name}_seed": self.draw(name).randrange(2**31) for name in inputs}

    def job(
        self,
        worker: str,
        nprocs: int | None = None,
        student: bool = True,
        scratch: bool = True,
        allowance: float = 0.0,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> Job:
        """A job for one of this exercise's workers; `nprocs` defaults to the check's world size.
        `allowance`: seconds on top of the deadline, for runs that must start interpreters. `deadline`: this
        run's own, instead of the grading's (a run whose mistake shows as a hang need not wait the whole one).
        The arguments are kept in name order: two checks that ask for the same run in another order share it."""
        return Job(
            target=f"{self.exercise.workers_module}:{worker}",
            world_size=self.world_size if nprocs is None else nprocs,
            kwargs=dict(sorted(kwargs.items())),
            student_file=self.student_file if student else None,
            backend=self.backend,
            deadline=(self.deadline if deadline is None else deadline) + allowance,
            debug_collectives=self.exercise.debug_collectives,
            scratch=self.runs.scratch if scratch else "",
        )

    def run(self, worker: str, nprocs: int | None = None, deadline: float | None = None, **kwargs: Any) -> RunResult:
        """Run a worker of this exercise on the ranks, with the student's file; raw outcome. `deadline`: as in `job`."""
        result = self.runs.run(self.job(worker, nprocs, deadline=deadline, **kwargs), (self.check, self.world_size))
        self.used.append(result)
        return result

    @overload
    def facts(
        self, worker: Worker[F], nprocs: int | None = None, deadline: float | None = None, **kwargs: Any
    ) -> list[F]: ...

    @overload
    def facts(
        self, worker: str, nprocs: int | None = None, deadline: float | None = None, **kwargs: Any
    ) -> list[dict[str, Any]]: ...

    def facts(
        self, worker: str | Worker[Any], nprocs: int | None = None, deadline: float | None = None, **kwargs: Any
    ) -> list[Any]:
        """Each rank's facts; fails the check (naming rank and stage) unless every rank reported, and, for a
        `Worker` with a schema, unless every report conforms to it."""
        if isinstance(worker, Worker):
            return self.require(self.run(worker.name, nprocs, deadline, **kwargs), schema=worker.facts)
        return self.require(self.run(worker, nprocs, deadline, **kwargs))

    def facts_until_failure(
        self,
        worker: Worker[F],
        proven: Iterable[str],
        proof: Callable[[list[F]], str | None],
        nprocs: int | None = None,
        **kwargs: Any,
    ) -> list[F]:
        """Each rank's facts, as `facts` gives them; and where the run failed, the facts `proven` recorded before the
        failure, if `proof` shows them complete (it returns what they cover, "the 8 steps every rank took", or None).

        One failure then costs the checks whose facts it cut short, not every check sharing the run. A failed rank's
        facts hold only the `proven` keys (UpToFailure): reading another one fails with the failure. A rank with no
        report, a stub, a proof that does not hold: the check fails with the failure, as `facts` would. The runner
        makes sure some check of the grading still says the failure (grader/judge/runner.py)."""
        result = self.run(worker.name, nprocs, **kwargs)
        verdict = failure_verdict(result, self.student_file)
        if verdict is None:
            return self.require(result, schema=worker.facts)
        failure = CheckFailed(verdict, failed_run=result)
        keys = frozenset(proven)
        if verdict.status != "failed" or verdict.message.startswith(NOT_IMPLEMENTED):
            raise failure
        ranks: list[dict[str, Any]] = []
        for outcome in result.ranks:
            if outcome.report is None or facts_problems(outcome.facts, worker.facts, complete=outcome.ok):
                raise failure
            if outcome.ok:
                ranks.append(outcome.facts)
            elif keys <= outcome.facts.keys():
                ranks.append(UpToFailure({key: outcome.facts[key] for key in keys}, failure))
            else:
                raise failure
        covered = proof(cast(list[F], ranks))
        if covered is None:
            raise failure
        self.judged_before(result, covered, verdict)
        return cast(list[F], ranks)

    def judged_before(self, run: RunResult, covered: str, failure: Verdict) -> None:
        """Say that this check was judged on `covered`, facts a proof showed complete before `run` failed. The runner
        holds a pass until some check says the failure, and says `failure` in the pass's place if none does: the
        verdict is the check's to give, since a run whose ranks ended well may still hold a failure (ex07's launch)."""
        self.judged_before_failure.append((run, failure))
        self.notes.append(f"judged on {covered}, recorded before the run failed (another check says how it failed)")

    @overload
    def require(self, result: RunResult, stage: str = "", *, schema: type[F]) -> list[F]: ...

    @overload
    def require(self, result: RunResult, stage: str = "") -> list[dict[str, Any]]: ...

    def require(self, result: RunResult, stage: str = "", schema: type | None = None) -> list[Any]:
        """Each rank's facts once every rank reported without an error (else the check fails with what went
        wrong); with a `schema`, once every report also conforms to it (else it fails saying what does not)."""
        verdict = failure_verdict(result, self.student_file, stage)
        if verdict is not None:
            raise CheckFailed(verdict, failed_run=result)
        self.notes += [
            f"rank {r.rank} died by signal {-r.status} after it had reported (ignored)"
            for r in result.ranks
            if r.status is not None and r.status < 0
        ]
        if schema is not None:
            for outcome in result.ranks:
                self.conform(outcome.facts, schema, outcome.rank)
        return [r.facts for r in result.ranks]

    def conform(self, facts: dict[str, Any], schema: type[F], rank: int, complete: bool = True) -> F:
        """Fail the check unless one rank's facts fit `schema` (`complete`: the rank ran to its end, so every
        required fact is there). A rank's report is untrusted: what does not fit is never read as a pass."""
        found = facts_problems(facts, schema, complete)
        if found:
            raise self.fail(
                f"rank {rank} reported facts the grader cannot judge: {'; '.join(found)}",
                details=f"schema: {schema.__name__} (in {schema.__module__})",
            )
        return cast(F, facts)

    @overload
    def reference(self, worker: Worker[F], **kwargs: Any) -> F: ...

    @overload
    def reference(self, worker: str, **kwargs: Any) -> dict[str, Any]: ...

    def reference(self, worker: str | Worker[Any], **kwargs: Any) -> Any:
        """Run a trusted worker on one fresh process that never loads the student's code.

        A reference depends on its arguments alone (never on files the ranks wrote), so its result
        may be shared by every grading that asks for the same thing."""
        name = worker.name if isinstance(worker, Worker) else worker
        result = self.runs.reference(self.job(name, 1, student=False, scratch=False, **kwargs))
        return self._trusted(worker, result)

    def replayer(self, worker: Worker[TrainingReplays], **kwargs: Any) -> Replayer[list[ReplayedStep]]:
        """The exercise's trusted replay `worker` of the shared training loop with these arguments and the
        grading's data and model seeds, as grader.judge.replay.prove takes it: requests in, each hypothesis'
        replayed steps out. It runs only when called, that is once a trajectory has left the reference."""
        return lambda requests: self.reference(worker, hypotheses=requests, **kwargs, **self.seeds("data", "model"))[
            "replays"
        ]

    @overload
    def inspect(self, worker: Worker[F], **kwargs: Any) -> F: ...

    @overload
    def inspect(self, worker: str, **kwargs: Any) -> dict[str, Any]: ...

    def inspect(self, worker: str | Worker[Any], **kwargs: Any) -> Any:
        """Run a trusted worker that reads what the ranks left behind (a checkpoint file, say), on
        one fresh process that never loads the student's code, where the ranks ran (in a sandbox,
        that is inside it: their files never leave it, and no student process is left by then)."""
        name = worker.name if isinstance(worker, Worker) else worker
        return self._trusted(worker, self.runs.run(self.job(name, 1, student=False, **kwargs)))

    @staticmethod
    def _trusted(worker: str | Worker[Any], result: RunResult) -> dict[str, Any]:
        """A trusted worker's facts. Its failure, or a report that does not fit its schema, is the grader's own
        defect: said as such (an error of the grader's), never as something a rank or the student did."""
        name = worker.name if isinstance(worker, Worker) else worker
        if not result.ok:
            rank = result.ranks[0]
            raise RuntimeError(
                f"the grader's trusted worker {name} failed: {rank.error or rank.report_problem}\n{rank.output}"
            )
        facts = result.ranks[0].facts
        found = facts_problems(facts, worker.facts) if isinstance(worker, Worker) else []
        if found:
            raise RuntimeError(
                f"the grader's trusted worker {name} reported facts outside its schema: {'; '.join(found)}"
            )
        return facts

    def fail(
        self,
        message: str,
        hint: HintName | None = None,
        details: str = "",
        proven: Proven | None = None,
        explains: RunResult | None = None,
    ) -> CheckFailed:
        """Raise this: `raise ctx.fail(...)` keeps the control flow visible at the call site. `proven`: the cause
        the message names, as the proof path proved it (grader/judge/proof.py); None where the message names none:
        a cause reaches a verdict no other way. `explains`: the failed run of the student's code this message says
        the failure of, in its own words (the runner then counts that failure as said)."""
        return CheckFailed(
            Verdict("failed", message, details, hint, cause=proven.cause if proven is not None else ""),
            explains=explains,
        )
