"""Causes as hypotheses the judge can run: a mistake is named only when replaying it reproduces the run.

Every exercise that names a cause from its numbers keeps its hypotheses as data, in `hypotheses.toml` next to
its checks, in one format: a cause, the sentence that names it, a hint, and what to replay. A hypothesis is one
change to a trusted replay: knobs of the shared training loop (grader.rank.training.MISTAKE_KNOBS) and another
batch schedule, or, where the file's `[replay]` table declares them, the knobs of the exercise's own trusted
replay worker (a simulation of W ranks in one process, say). Its values may be the run's numbers ("b", "W",
"1/W", "k"...) or a parameter fitted from the first step that differs ("fit").

One protocol for all of them (`prove`): the hypotheses that can differ from the correct run here become
requests; the exercise's trusted worker replays them on the same inputs (a `Replayer`); the check says what
"reproduces" means for its facts; the judge names a cause only when its replay reproduces the student's run
and no other hypothesis' does.
"""

from __future__ import annotations

import ast
import operator
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar

import numpy as np

from grader.engine.facts import ReplayRequest
from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven, replayed

R = TypeVar("R")
# an exercise's trusted replay worker as a check hands it over: requests in, each hypothesis' replay out
Replayer = Callable[[dict[str, ReplayRequest]], Mapping[str, R]]

# a run's recorded steps as a check hands them over: its typed facts (a TypedDict per step) or plain dicts
Steps = Sequence[Mapping[str, Any]]
FIT = "fit"  # a knob's value fitted from the student's numbers (grader.judge.trajectory's Observation.fits)
# What a knob takes: "number" (a number, an expression of the run's numbers, or "fit"), "flag" (true or false),
# or the list of the words it may be.
KnobKind = str | list[str]
# the knobs of grader.rank.training.MISTAKE_KNOBS (the rank side, which the judge does not import): the replay
# of a hypotheses.toml without a [replay] table
SHARED_KNOBS: dict[str, KnobKind] = {
    "loss_scale": "number",
    "summed_in": "number",
    "lr_scale": "number",
    "optimizer": ["sgd", "adam", "adamw"],
    "momentum": "number",
    "nesterov": "flag",
    "weight_decay": "number",
    "clip_norm": "number",
    "keep_grads": "flag",
    "fresh_optimizer_at": "number",
}
KNOBS = frozenset(SHARED_KNOBS)
# the run's numbers a value or a sentence may name (resumed: the first step after resuming, ex09)
NUMBERS = frozenset({"b", "W", "k", "m", "lr", "momentum", "resumed"})  # k: accumulation steps; m: micro-batches
FIELDS = frozenset({"cause", "says", "hint", "schedule", "mistake", "fitted"})
REPLAY_FIELDS = frozenset({"knobs", "numbers"})


@dataclass(frozen=True)
class Hypothesis:
    cause: Cause
    says: str  # the cause and its fix, as a message names it; {b}, {W}, {k}, {m}, {value} are filled in
    hint: HintName | None = None
    schedule: str = "correct"  # the samples of each step: a key of the reference's schedules
    mistake: dict[str, Any] = field(default_factory=dict)  # knob -> value, a symbol of the run, or "fit"
    fitted: bool = False  # tried only when no hypothesis without a fitted value reproduces the run
    words: frozenset[str] = frozenset({"optimizer"})  # the knobs whose strings are words, not numbers of the run

    def resolved(self, numbers: dict[str, float], fits: dict[str, float]) -> dict[str, Any] | None:
        """The replay's knobs with the run's numbers; None where it cannot differ from the correct run
        here (a factor that is 1) or a fitted value is missing."""
        knobs: dict[str, Any] = {}
        for knob, value in self.mistake.items():
            if value == FIT:
                if knob not in fits:
                    return None
                value = fits[knob]
            elif isinstance(value, str) and knob not in self.words:
                if not names_in(value) <= numbers.keys():
                    return None  # a number this run does not have (k where nothing accumulates)
                value = evaluate(value, numbers)
                if value == 1 and knob.endswith("_scale"):
                    return None
            knobs[knob] = value
        return knobs

    def sentence(self, numbers: dict[str, float], knobs: dict[str, Any]) -> str:
        fitted = next((knobs[k] for k, v in self.mistake.items() if v == FIT), None)
        words = {name: f"{value:g}" for name, value in numbers.items()}
        return self.says.format(**words, value=f"{fitted:.3g}" if fitted is not None else "")


_OPERATORS = {ast.Mult: operator.mul, ast.Div: operator.truediv, ast.Add: operator.add, ast.Sub: operator.sub}


def names_in(expression: str) -> set[str]:
    return {node.id for node in ast.walk(ast.parse(expression, mode="eval")) if isinstance(node, ast.Name)}


def evaluate(expression: str, numbers: dict[str, float]) -> float:
    """A product or quotient of the run's named numbers ("b", "1/W", "W*k"), and nothing else."""

    def value(node: ast.expr) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in numbers:
            return float(numbers[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return float(_OPERATORS[type(node.op)](value(node.left), value(node.right)))
        raise ValueError(f"not a number of the run: {ast.unparse(node)}")

    return value(ast.parse(expression, mode="eval").body)


def declared(document: Mapping[str, Any]) -> tuple[dict[str, KnobKind], frozenset[str]]:
    """The knobs and the run's numbers a hypotheses.toml may use: its `[replay]` table's, else the shared
    loop's."""
    table = document.get("replay", {})
    return dict(table.get("knobs", SHARED_KNOBS)), frozenset(table.get("numbers", NUMBERS))


def _replay_problems(table: object) -> list[str]:
    if not isinstance(table, dict):
        return ["[replay] must be a table"]
    found = [f"[replay]: unknown field {key!r} (fields: knobs, numbers)" for key in sorted(set(table) - REPLAY_FIELDS)]
    knobs, numbers = table.get("knobs", {}), table.get("numbers", [])
    if not isinstance(knobs, dict) or not knobs:
        found.append("[replay]: knobs must be a table of the replay worker's knobs")
    else:
        found += [
            f'[replay]: knob {knob!r} must be "number", "flag" or a list of words'
            for knob, kind in knobs.items()
            if kind not in ("number", "flag") and not (isinstance(kind, list) and all(isinstance(w, str) for w in kind))
        ]
    if not isinstance(numbers, list) or not all(isinstance(n, str) and n.isidentifier() for n in numbers):
        found.append("[replay]: numbers must be a list of names")
    return found


def _value_problems(where: str, knob: str, value: object, kind: KnobKind, numbers: frozenset[str]) -> list[str]:
    if value == FIT:
        return [] if kind == "number" else [f'{where}: {knob} = "fit", but only a number is fitted']
    if isinstance(kind, list):
        return [] if value in kind else [f"{where}: {knob} = {value!r}, not one of {kind}"]
    if kind == "flag":
        return [] if isinstance(value, bool) else [f"{where}: {knob} = {value!r}, not true or false"]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return [f"{where}: {knob} = {value!r}, not a number"]
    if isinstance(value, str):
        try:
            unknown = names_in(value) - numbers
        except SyntaxError:
            unknown = {value}
        if unknown:
            return [f"{where}: {knob} = {value!r} names {sorted(unknown)}, not numbers of the run"]
    return []


def problems(document: object, hints: set[str]) -> list[str]:
    """What is wrong with a hypotheses.toml (for `grader lint-course`): its `[replay]` table, if any, must declare
    the replay's knobs and numbers; each hypothesis must say a cause with known fields, a hint of its exercise,
    known knobs with values of their kind (the run's numbers, "fit" only where fitted), and sentences that name
    only what is filled in."""
    if not isinstance(document, dict):
        return ["it holds no [[hypothesis]] entries"]
    found = [] if "replay" not in document else _replay_problems(document["replay"])
    if found:
        return found
    knobs, numbers = declared(document)
    entries = document.get("hypothesis")
    if not isinstance(entries, list) or not entries:
        return ["it holds no [[hypothesis]] entries"]
    seen: set[str] = set()
    for number, entry in enumerate(entries, 1):
        where = f"hypothesis {number}"
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("cause"), str)
            or not isinstance(entry.get("says"), str)
        ):
            found.append(f"{where}: needs a cause and a says, both strings")
            continue
        where = f"hypothesis {entry['cause']!r}"
        found += [f"{where}: unknown field {key!r}" for key in sorted(set(entry) - FIELDS)]
        if entry["cause"] in seen:
            found.append(f"{where}: named twice")
        seen.add(entry["cause"])
        if entry.get("hint") is not None and entry["hint"] not in hints:
            found.append(f"{where}: hint {entry['hint']!r} is not a hint of this exercise")
        mistake = entry.get("mistake", {})
        if not isinstance(mistake, dict):
            found.append(f"{where}: mistake must be a table of knobs")
            continue
        found += [
            f"{where}: unknown knob {knob!r} (knobs: {', '.join(sorted(knobs))})" for knob in set(mistake) - set(knobs)
        ]
        fits = [knob for knob, value in mistake.items() if value == FIT]
        if bool(fits) != bool(entry.get("fitted", False)):
            found.append(f'{where}: a fitted hypothesis has one knob = "fit", and only a fitted one')
        for knob, value in mistake.items():
            if knob in knobs:
                found += _value_problems(where, knob, value, knobs[knob], numbers)
        try:
            entry["says"].format(**dict.fromkeys(numbers, 1), value=1)
        except (KeyError, IndexError, ValueError) as exc:
            found.append(f"{where}: says names {exc}, which is not filled in (only {sorted(numbers)} and value)")
    return found


def load(package: str) -> tuple[Hypothesis, ...]:
    """The hypotheses of an exercise: `hypotheses.toml` in its checks package."""
    document = tomllib.loads(resources.files(package).joinpath("hypotheses.toml").read_text())
    knobs, _ = declared(document)
    words = frozenset(knob for knob, kind in knobs.items() if isinstance(kind, list))
    return tuple(_hypothesis(entry, words) for entry in document["hypothesis"])


def _hypothesis(entry: dict[str, Any], words: frozenset[str]) -> Hypothesis:
    """One entry as the judge uses it; its names are checked by `grader lint-course`, from the TOML."""
    hint = entry.get("hint")
    return Hypothesis(
        **{**entry, "cause": Cause(entry["cause"]), "hint": None if hint is None else HintName(hint), "words": words}
    )


REPLAY_RTOL = 1e-3  # of each tensor's largest value: fp32 rounding differs between DDP and one process


def _within(got: Mapping[str, Any], want: Mapping[str, Any], scales: dict[str, float]) -> bool:
    """Every tensor of `want` in `got`, off by at most REPLAY_RTOL of its scale over the whole replay. Gradients
    and updates are compared, not weights: a weight's size would hide a wrong update."""
    for name, expected in want.items():
        actual = got.get(name)
        if actual is None or np.shape(actual) != np.shape(expected):
            return False
        if (
            np.size(expected)
            and float(np.max(np.abs(np.asarray(actual) - expected))) > REPLAY_RTOL * scales[name] + 1e-7
        ):
            return False
    return True


def _scales(steps: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each tensor's largest magnitude over all the steps. A step whose own values are small (a saturated
    layer after a too-large step, say) still carries the rounding the earlier, larger steps left in the
    weights: judged against its own scale, a true replay could fail there."""
    scales: dict[str, float] = {}
    for step in steps:
        for name, value in step.items():
            size = float(np.max(np.abs(value))) if np.size(value) else 0.0
            scales[name] = max(scales.get(name, 0.0), size)
    return scales


def _updates(steps: Steps, start: Mapping[str, Any]) -> list[dict]:
    before, updates = start, []
    for step in steps:
        updates.append({name: step["params"][name] - before[name] for name in step["params"] if name in before})
        before = step["params"]
    return updates


def reproduces(observed: Steps, replayed: Steps, start: Mapping[str, Any]) -> bool:
    """Whether a replay from the same `start` equals the run at every recorded step: the gradient each step
    used (where the run saw one: a rank whose optimizer holds nothing steps with none) and the update it made."""
    if len(observed) != len(replayed) or not observed:
        return False
    replayed_updates = _updates(replayed, start)
    grad_scales, update_scales = _scales([s["grads"] for s in replayed]), _scales(replayed_updates)
    return all(
        (got["grads"] is None or _within(got["grads"], want["grads"], grad_scales))
        and _within(got_update, want_update, update_scales)
        for got, want, got_update, want_update in zip(observed, replayed, _updates(observed, start), replayed_updates)
    )


@dataclass(frozen=True)
class Proof:
    """What the replays showed: the hypotheses whose replay reproduces the run (several when this
    run's numbers cannot tell them apart), each with the sentence naming it."""

    proven: tuple[tuple[Hypothesis, str], ...]

    @property
    def named(self) -> tuple[Hypothesis, str] | None:
        return self.proven[0] if len(self.proven) == 1 else None

    @property
    def cause(self) -> Proven | None:
        """The one hypothesis whose replay reproduces the run, as a verdict names it; None when none or several do."""
        return replayed(self.named[0].cause) if self.named is not None else None


def requests(
    hypotheses: Sequence[Hypothesis],
    numbers: dict[str, float],
    fits: dict[str, float] | None = None,
    fitted: bool = False,
) -> dict[str, tuple[Hypothesis, ReplayRequest]]:
    """The hypotheses (fitted ones, or the others) that can differ from the correct run with these numbers, each
    with the request its replay worker takes."""
    found = {}
    for h in hypotheses:
        if h.fitted == fitted and (knobs := h.resolved(numbers, fits or {})) is not None:
            found[str(h.cause)] = (h, ReplayRequest(schedule=h.schedule, mistake=knobs))
    return found


def prove(
    hypotheses: Sequence[Hypothesis],
    numbers: dict[str, float],
    fits: dict[str, float],
    replay: Replayer[R],
    reproduced: Callable[[R], bool],
) -> Proof:
    """Replay the hypotheses that can differ from the correct run here (`replay`: the exercise's trusted worker)
    and keep those whose replay `reproduced` says is the run. Fitted hypotheses are replayed only when no other
    one reproduces the run."""
    for fitted in (False, True):
        asked = requests(hypotheses, numbers, fits, fitted)
        if not asked:
            continue
        replays = replay({name: request for name, (_, request) in asked.items()})
        proven = tuple(
            (h, h.sentence(numbers, request["mistake"]))
            for name, (h, request) in asked.items()
            if name in replays and reproduced(replays[name])
        )
        if proven:
            return Proof(proven)
    return Proof(())
