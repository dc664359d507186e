"""Grades one exercise file: every selected check, at every world size, into `CheckResult`s.

Problems with the file itself (syntax, missing function, wrong signature) are found statically
first and reported once per check as an error, without starting any rank. A check that raises
anything but `CheckFailed` is the grader's bug: reported as an error, never as a pass.
"""

from __future__ import annotations

import importlib
import importlib.util
import secrets
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from grader import student_files
from grader.catalog import CheckSpec, Exercise
from grader.engine import EngineError, Runner, RunResult
from grader.engine.facts import REFUSED
from grader.engine.tamper import TAMPERED
from grader.judge.api import DEFAULT_DEADLINE_S, CheckContext, CheckFailed, References, RunCache, checks_in
from grader.judge.diagnose import NOT_IMPLEMENTED, import_calls, test_call_message
from grader.judge.leftovers import stray_message
from grader.judge.missing_api import skipped_if_api_missing
from grader.judge.verdict import CheckResult, Status, Verdict

PUBLIC_CHECKS = frozenset({"public"})  # what students run
ALL_CHECKS = frozenset({"public", "hidden"})  # what instructors grade with
ENGINE_FAILURE = "the grader could not run the ranks"  # opens the message of a result whose engine broke
MAX_TAMPERED = 20  # lines a result keeps of what was replaced: one marks it, a flood says nothing more


@dataclass(frozen=True)
class GradeOptions:
    world_sizes: tuple[int, ...] | None = None  # None: each check's own (catalog)
    backend: str = "gloo"
    deadline: float = DEFAULT_DEADLINE_S
    visibilities: frozenset[str] = PUBLIC_CHECKS
    only: frozenset[str] | None = None  # check names to run; None: all
    seed: int | None = None  # the grading's random inputs; None: drawn anew for each exercise graded


def load_checks(exercise: Exercise) -> dict[str, Callable]:
    """The exercise's checks: `checks.py`, plus `hidden.py` where the course has one.

    Hidden checks live in their own module so that `grader release` can leave their code out.
    """
    module = importlib.import_module(f"{exercise.checks_package}.checks")
    registry = checks_in(module.__name__)
    hidden = f"{exercise.checks_package}.hidden"
    if importlib.util.find_spec(hidden) is not None:
        registry.update(checks_in(importlib.import_module(hidden).__name__))
    return registry


@dataclass
class _Outcome:
    """A check's verdict, and which failed run of the student's code it says: as the run's own failure
    (`failed_run`), or in words of its own (`explains`)."""

    verdict: Verdict
    failed_run: RunResult | None = None
    explains: RunResult | None = None


def _verdict(function: Callable, context: CheckContext) -> _Outcome:
    try:
        outcome = function(context)
    except CheckFailed as failed:
        return _Outcome(failed.verdict, failed.failed_run, failed.explains)
    except EngineError as exc:
        return _Outcome(Verdict("error", f"{ENGINE_FAILURE}: {exc}", engine_failed=True))
    except Exception as exc:  # a defect of the check, not of the student's code
        said = f"internal grader error in this check: {type(exc).__name__}: {exc}"
        return _Outcome(Verdict("error", said, traceback.format_exc()))
    if isinstance(outcome, Verdict):
        return _Outcome(outcome)
    return _Outcome(Verdict("passed", outcome or ""))


def _knock_on(verdict: Verdict, first: str) -> Verdict:
    """A check failed only because the run it shares with `first` failed: it says so and points there, where
    the failure is said once, traceback included, with its hint (one mistake, one diagnosis)."""
    return Verdict(verdict.status, f"not judged: the run it shares with {first} failed (a knock-on: {first} says why)")


def grade_exercise(
    engine: Runner,
    exercise: Exercise,
    student_file: Path,
    options: GradeOptions = GradeOptions(),
    on_result: Callable[[CheckResult], None] | None = None,
    references: References | None = None,
) -> list[CheckResult]:
    """Every selected check at every world size; `references` runs the trusted references
    (default: on `engine` itself, which is fine where no sandbox separates the two)."""
    problem = student_files.problems(student_file, exercise)
    if options.seed is None:
        options = replace(options, seed=secrets.randbelow(2**31))
    registry = load_checks(exercise)
    runs = RunCache(engine, references)
    try:
        return _grade_checks(runs, registry, problem, exercise, student_file, options, on_result)
    finally:
        runs.close()


def _grade_checks(
    runs: RunCache,
    registry: dict[str, Callable],
    problem: str | None,
    exercise: Exercise,
    student_file: Path,
    options: GradeOptions,
    on_result: Callable[[CheckResult], None] | None,
) -> list[CheckResult]:
    results: list[CheckResult] = []
    said_by: dict[int, tuple[RunResult, str]] = {}  # a failed run -> the first check that said its failure
    failures = _Failures(exercise)
    emitted = 0
    for spec in _selected(exercise.checks, options):
        sizes = options.world_sizes or spec.world_sizes
        for world_size in sizes:
            started = time.perf_counter()
            warnings: list[str] = []
            replaced: tuple[str, ...] = ()
            judged_before_failure: list[tuple[RunResult, Verdict]] = []
            function = registry.get(spec.name)
            if problem is not None:
                verdict = Verdict("error", problem)
            elif function is None:
                verdict = Verdict(
                    "error",
                    f"the catalog names check {spec.name!r} but {exercise.checks_package}.checks defines no such check",
                )
            else:
                context = CheckContext(
                    runs,
                    exercise,
                    student_file,
                    world_size,
                    options.backend,
                    options.deadline,
                    options.seed or 0,
                    check=spec.name,
                )
                outcome = _verdict(function, context)
                verdict, failed_run = outcome.verdict, outcome.failed_run
                judged_before_failure = context.judged_before_failure
                # a stub and a file that cannot be imported are every check's own verdict: said alike, once
                if (
                    failed_run is not None
                    and verdict.status == "failed"
                    and not verdict.message.startswith(NOT_IMPLEMENTED)
                ):
                    if id(failed_run) in said_by:
                        verdict = _knock_on(verdict, said_by[id(failed_run)][1])
                    else:
                        said_by[id(failed_run)] = (failed_run, spec.name)
                if outcome.explains is not None and verdict.status == "failed":
                    said_by.setdefault(id(outcome.explains), (outcome.explains, spec.name))
                verdict = skipped_if_api_missing(verdict, context.used, exercise)
                runs.explain_hang((spec.name, world_size), verdict)
                left = stray_message(context.used)
                if left and spec.strays == "fail" and verdict.status == "passed":
                    verdict = Verdict("failed", f"process left behind: {left}")
                elif left:
                    warnings.append(left)
                if verdict.status == "passed":
                    verdict.details = "\n".join(context.notes)
                _name_test_calls(verdict, warnings, context)
                verdict = _refusing(verdict, refused(context.used))
                replaced = tampered(context.used)
                if replaced:
                    warnings.append(f"marked: the code under test replaced the grader's code ({'; '.join(replaced)})")
            share = spec.points / len(sizes)
            result = CheckResult(
                **asdict(verdict),
                exercise=exercise.id,
                check=spec.name,
                world_size=world_size,
                seconds=time.perf_counter() - started,
                points=share if verdict.status == "passed" else 0.0,
                max_points=share,
                visibility=spec.visibility,
                hint_number=exercise.hint_number(verdict.hint) if verdict.hint else None,
                notes=warnings,
                tampered=replaced,
            )
            results.append(result)
            if result.status in ("passed", "failed"):
                failures.owe(len(results) - 1, judged_before_failure)
            failures.settle(said_by)
            emitted = _emit(results, emitted, failures.held(), on_result)
    failures.charge(results, said_by)
    _emit(results, emitted, set(), on_result)
    return results


class _Failures:
    """Failed runs whose checks were judged on facts recorded before the failure, while no check had said it yet.

    Such a result waits (it is not emitted) until a later check says that failure. If none does by the end of the
    grading, the failure is said where it was judged: after the first such result that failed for its own reason,
    else as the verdict of the first that passed. A failed run always costs at least one check, and is always said."""

    def __init__(self, exercise: Exercise) -> None:
        self._exercise = exercise
        # a failed run -> the run, how it failed, the passes it holds
        self._owed: dict[int, tuple[RunResult, Verdict, list[int]]] = {}

    def owe(self, index: int, runs: Iterable[tuple[RunResult, Verdict]]) -> None:
        for run, failure in runs:
            self._owed.setdefault(id(run), (run, failure, []))[2].append(index)

    def settle(self, said_by: dict[int, tuple[RunResult, str]]) -> None:
        for key in [key for key in self._owed if key in said_by]:
            del self._owed[key]

    def held(self) -> set[int]:
        return {index for _, _, indices in self._owed.values() for index in indices}

    def charge(self, results: list[CheckResult], said_by: dict[int, tuple[RunResult, str]]) -> None:
        self.settle(said_by)
        for run, verdict, indices in sorted(self._owed.values(), key=lambda owed: owed[2][0]):
            failed = [index for index in indices if results[index].status == "failed"]
            if failed:
                said = results[failed[0]]
                results[failed[0]] = replace(
                    said,
                    message=f"{said.message}\nthe run then failed as well: {verdict.message}",
                    details="\n".join(filter(None, [said.details, verdict.details])),
                    verbose_details="\n".join(filter(None, [said.verbose_details, verdict.verbose_details])),
                )
                said_by[id(run)] = (run, said.check)
                continue
            first = indices[0]
            said = results[first]
            results[first] = replace(
                said,
                status=verdict.status,
                message=verdict.message,
                details=verdict.details,
                verbose_details=verdict.verbose_details,
                hint=verdict.hint,
                hint_number=self._exercise.hint_number(verdict.hint) if verdict.hint else None,
                points=0.0,
            )
            said_by[id(run)] = (run, said.check)
        self._owed.clear()


def _emit(
    results: list[CheckResult], emitted: int, held: set[int], on_result: Callable[[CheckResult], None] | None
) -> int:
    """Hand the results on in order, up to the first one still held; the index of the next one to hand on."""
    while emitted < len(results) and emitted not in held:
        if on_result:
            on_result(results[emitted])
        emitted += 1
    return emitted


def tampered(runs: Iterable[RunResult]) -> tuple[str, ...]:
    """What the ranks of these runs found of the grader's own code replaced once the code under test had run
    (tamper.TAMPERED), one line per rank and thing, each once. A report is untrusted: strings only, capped."""
    lines: dict[str, None] = {}
    for run in runs:
        for rank in run.ranks:
            found = rank.facts.get(TAMPERED)
            if isinstance(found, list):
                lines.update((f"rank {rank.rank}: {line[:300]}", None) for line in found if isinstance(line, str))
    return tuple(lines)[:MAX_TAMPERED]


def refused(runs: Iterable[RunResult]) -> tuple[str, ...]:
    """Each object of a type the contract does not allow that a rank found where it reads a fact (REFUSED, from
    grader/engine/exact.py), in a sentence: "rank 0's optimizer state holds a torch.Tensor subclass `Fake`; the
    contract asks for plain tensors". A report is untrusted: a malformed record is still a refusal, its strings
    capped."""
    lines: dict[str, None] = {}
    for run in runs:
        for rank in run.ranks:
            found = rank.facts.get(REFUSED)
            for record in found if isinstance(found, list) else ():
                said = {key: str(record.get(key, ""))[:100] if isinstance(record, dict) else "" for key in _REFUSAL}
                kind = f"a {said['kind']} subclass" if said["kind"] else "a"
                lines[
                    f"rank {rank.rank}'s {said['where'] or 'report'} holds {kind} `{said['type'] or '?'}`; "
                    f"the contract asks for {said['asks'] or 'plain objects'}"
                ] = None
    return tuple(lines)[:MAX_TAMPERED]


_REFUSAL = ("where", "kind", "type", "asks")


def _refusing(verdict: Verdict, refusals: tuple[str, ...]) -> Verdict:
    """A check whose ranks refused an object fails, whatever it found: the fact it would rest on is missing."""
    if not refusals:
        return verdict
    said = "\n".join(refusals)
    message = said if verdict.status == "passed" else f"{said}\n{verdict.message}"
    return replace(verdict, status="failed", message=message)


def _name_test_calls(verdict: Verdict, warnings: list[str], context: CheckContext) -> None:
    """A graded function called by the file itself at import ran on every rank: say so first, since
    the check then blames the function for what the test call did (or warn, if it passed anyway)."""
    calls = import_calls(context.used, context.student_file, context.exercise.function_names)
    if not calls:
        return
    said = test_call_message(calls, context.student_file)
    if verdict.status == "passed":
        warnings.append(said)
    else:
        verdict.message = f"{said}\n{verdict.message}"


def not_run(exercise: Exercise, options: GradeOptions, status: Status, message: str) -> list[CheckResult]:
    """A result for every selected check and world size that could not run, with zero points."""
    return [
        CheckResult(
            status,
            message,
            exercise=exercise.id,
            check=spec.name,
            world_size=w,
            seconds=0.0,
            points=0.0,
            max_points=spec.points / len(options.world_sizes or spec.world_sizes),
            visibility=spec.visibility,
        )
        for spec in _selected(exercise.checks, options)
        for w in (options.world_sizes or spec.world_sizes)
    ]


def _selected(checks: Iterable[CheckSpec], options: GradeOptions) -> list[CheckSpec]:
    return [
        spec
        for spec in checks
        if spec.visibility in options.visibilities and (options.only is None or spec.name in options.only)
    ]
