"""Causes as hypotheses the judge can run: a mistake is named only when replaying it reproduces the run.

Each training exercise keeps its hypotheses as data, in `hypotheses.toml` next to its checks. A
hypothesis is one change to the trusted reference loop (a knob of grader.rank.training.MISTAKE_KNOBS,
or another batch schedule the exercise's reference computes). Its values may be the run's numbers
("b", "W", "1/W", "k"...) or a parameter fitted from the first step that differs ("fit"). The
exercise's trusted worker replays every hypothesis on the same inputs; the judge names a cause only
when its replay equals the student's run at every recorded step and no other hypothesis' does.
"""

from __future__ import annotations

import ast
import operator
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from grader.judge.names import Cause, HintName

# a run's recorded steps as a check hands them over: its typed facts (a TypedDict per step) or plain dicts
Steps = Sequence[Mapping[str, Any]]
FIT = "fit"  # a knob's value fitted from the student's numbers (grader.judge.trajectory's Observation.fits)
# the knobs of grader.rank.training.MISTAKE_KNOBS (the rank side, which the judge does not import)
KNOBS = frozenset(
    {
        "loss_scale",
        "summed_in",
        "lr_scale",
        "optimizer",
        "momentum",
        "nesterov",
        "weight_decay",
        "clip_norm",
        "keep_grads",
        "fresh_optimizer_at",
    }
)
# the run's numbers a value or a sentence may name (resumed: the first step after resuming, ex09)
NUMBERS = frozenset({"b", "W", "k", "m", "lr", "momentum", "resumed"})  # k: accumulation steps; m: micro-batches
FIELDS = frozenset({"cause", "says", "hint", "schedule", "mistake", "fitted"})


@dataclass(frozen=True)
class Hypothesis:
    cause: Cause
    says: str  # the cause and its fix, as a message names it; {b}, {W}, {k}, {m}, {value} are filled in
    hint: HintName | None = None
    schedule: str = "correct"  # the samples of each step: a key of the reference's schedules
    mistake: dict[str, Any] = field(default_factory=dict)  # knob -> value, a symbol of the run, or "fit"
    fitted: bool = False  # tried only when no hypothesis without a fitted value reproduces the run

    def resolved(self, numbers: dict[str, float], fits: dict[str, float]) -> dict[str, Any] | None:
        """The replay's knobs with the run's numbers; None where it cannot differ from the correct run
        here (a factor that is 1) or a fitted value is missing."""
        knobs: dict[str, Any] = {}
        for knob, value in self.mistake.items():
            if value == FIT:
                if knob not in fits:
                    return None
                value = fits[knob]
            elif isinstance(value, str) and knob not in ("optimizer",):
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


def problems(entries: object, hints: set[str]) -> list[str]:
    """What is wrong with a hypotheses.toml's entries (for `grader lint-course`): each must say a cause with
    known fields, a hint of its exercise, known knobs, values that are the run's numbers, "fit" only where
    fitted, and sentences that name only what is filled in."""
    if not isinstance(entries, list) or not entries:
        return ["it holds no [[hypothesis]] entries"]
    found, seen = [], set()
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
            f"{where}: unknown knob {knob!r} (knobs: {', '.join(sorted(KNOBS))})" for knob in set(mistake) - KNOBS
        ]
        fits = [knob for knob, value in mistake.items() if value == FIT]
        if bool(fits) != bool(entry.get("fitted", False)):
            found.append(f'{where}: a fitted hypothesis has one knob = "fit", and only a fitted one')
        for knob, value in mistake.items():
            if isinstance(value, str) and value != FIT and knob != "optimizer":
                try:
                    unknown = names_in(value) - NUMBERS
                except SyntaxError:
                    unknown = {value}
                if unknown:
                    found.append(f"{where}: {knob} = {value!r} names {sorted(unknown)}, not numbers of the run")
        try:
            entry["says"].format(**dict.fromkeys(NUMBERS, 1), value=1)
        except (KeyError, IndexError, ValueError) as exc:
            found.append(f"{where}: says names {exc}, which is not filled in (only {sorted(NUMBERS)} and value)")
    return found


def load(package: str) -> tuple[Hypothesis, ...]:
    """The hypotheses of an exercise: `hypotheses.toml` in its checks package."""
    text = resources.files(package).joinpath("hypotheses.toml").read_text()
    return tuple(_hypothesis(entry) for entry in tomllib.loads(text)["hypothesis"])


def _hypothesis(entry: dict[str, Any]) -> Hypothesis:
    """One entry as the judge uses it; its names are checked by `grader lint-course`, from the TOML."""
    hint = entry.get("hint")
    return Hypothesis(**{**entry, "cause": Cause(entry["cause"]), "hint": None if hint is None else HintName(hint)})


REPLAY_RTOL = 1e-3  # of each tensor's largest value: fp32 rounding differs between DDP and one process


def _within(got: dict, want: dict, scales: dict[str, float]) -> bool:
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


def _scales(steps: list[dict]) -> dict[str, float]:
    """Each tensor's largest magnitude over all the steps. A step whose own values are small (a saturated
    layer after a too-large step, say) still carries the rounding the earlier, larger steps left in the
    weights: judged against its own scale, a true replay could fail there."""
    scales: dict[str, float] = {}
    for step in steps:
        for name, value in step.items():
            size = float(np.max(np.abs(value))) if np.size(value) else 0.0
            scales[name] = max(scales.get(name, 0.0), size)
    return scales


def _updates(steps: Steps, start: dict) -> list[dict]:
    before, updates = start, []
    for step in steps:
        updates.append({name: step["params"][name] - before[name] for name in step["params"] if name in before})
        before = step["params"]
    return updates


def reproduces(observed: Steps, replayed: list[dict], start: dict) -> bool:
    """Whether a replay from the same `start` equals the run at every recorded step: the gradient each step
    used and the update it made."""
    if len(observed) != len(replayed) or not observed:
        return False
    replayed_updates = _updates(replayed, start)
    grad_scales, update_scales = _scales([s["grads"] for s in replayed]), _scales(replayed_updates)
    return all(
        _within(got["grads"], want["grads"], grad_scales) and _within(got_update, want_update, update_scales)
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


def prove(
    observed: Steps,
    start: dict,
    hypotheses: tuple[Hypothesis, ...],
    numbers: dict[str, float],
    fits: dict[str, float],
    replay: Any,
) -> Proof:
    """Replay the hypotheses that can differ from the correct run here (`replay`: {name: {"schedule",
    "mistake"}} -> {name: steps}, the exercise's trusted worker) and keep those that reproduce
    `observed`. Fitted hypotheses are replayed only when no other one reproduces the run."""
    for fitted in (False, True):
        candidates = {
            h.cause: (h, knobs)
            for h in hypotheses
            if h.fitted == fitted and (knobs := h.resolved(numbers, fits)) is not None
        }
        if not candidates:
            continue
        replays = replay({name: {"schedule": h.schedule, "mistake": knobs} for name, (h, knobs) in candidates.items()})
        proven = tuple(
            (h, h.sentence(numbers, knobs))
            for name, (h, knobs) in candidates.items()
            if reproduces(observed, replays.get(name) or [], start)
        )
        if proven:
            return Proof(proven)
    return Proof(())
