"""Judging a training trajectory against its reference: localize the first difference, then name a
cause only when a replay of it reproduces the run (docs/maintainers/DIAGNOSES.md).

A trajectory is the list of optimizer steps one rank took: the loss(es) it called backward() on, the
gradient the step used, the weights after it and the optimizer's state. The first step that leaves
the reference is located, and within it the first phase (the batch, the gradient, the update), with
what was measured and what was expected: that observation is true whatever the cause. Then the
exercise's hypotheses are replayed on the trusted reference (grader.judge.replay); one is named only
if its replay equals the run at every step and no other one's does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from grader.engine.facts import ReplayedStep
from grader.judge.compare import Arrays, first_difference, fraction, proportional, scale_of
from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven
from grader.judge.replay import Hypothesis, Replayer, Steps, prove, reproduces
from grader.judge.tolerance import close


@dataclass(frozen=True)
class Finding:
    """What a diagnosis found: a message naming a cause only with its proof (grader/judge/proof.py), else what
    was measured. A cause without a proof is refused where the finding is made, not where it is reported."""

    message: str
    step: int = 0
    hint: HintName | None = None
    proven: Proven | None = None

    @property
    def cause(self) -> Cause | Literal["measured"]:
        return self.proven.cause if self.proven is not None else "measured"


@dataclass(frozen=True)
class Setting:
    lr: float
    momentum: float
    factors: dict[str, int]  # the run's numbers a hypothesis may use: {"b": 8, "W": 2}
    reference: str  # what the reference is, for plain messages
    labels: dict[int, str] = field(default_factory=dict)  # step -> where it is ("the first step of epoch 1")
    context: str = ""  # prefixed to the measurement ("with k=2, ")
    subject: str = "rank 0"  # whose trajectory this is
    hypotheses: tuple[Hypothesis, ...] = ()
    replay: Replayer[list[ReplayedStep]] | None = None  # the exercise's trusted replay worker
    losses: list[list[float]] | None = None  # per step, the mean losses of the rank's (micro-)batches
    optimizer: str = ""  # the reference's optimizer as messages name it; "" for SGD(lr, momentum)


def _scaled(arrays: Arrays, factor: float) -> Arrays:
    return {name: factor * value for name, value in arrays.items()}


def _plus(a: Arrays, b: Arrays) -> Arrays:
    return {name: a[name] + b[name] for name in b if name in a}


def _minus(a: Arrays, b: Arrays) -> Arrays:
    return {name: a[name] - b[name] for name in b if name in a}


def _largest(arrays: Arrays) -> float:
    return max((float(np.max(np.abs(v))) for v in arrays.values() if np.size(v)), default=0.0)


def _norm(arrays: Arrays) -> float:
    return float(np.sqrt(sum(float(np.sum(np.square(v, dtype=np.float64))) for v in arrays.values())))


def _round(value: float) -> float:
    """Three significant digits: a fitted 0.49987 is the 0.5 a student wrote; the replay then decides."""
    return float(f"{value:.3g}")


def _listed(names: list[str]) -> str:
    shown = names[:4] + ([f"{len(names) - 4} more"] if len(names) > 4 else [])
    return ", ".join(shown[:-1]) + f" and {shown[-1]}" if len(shown) > 1 else shown[0]


def by_parameter(actual: Arrays, expected: Arrays, what: str) -> str:
    """Where only some parameters are off, each by an exact factor, and every other one equals the reference's:
    "inp.weight and inp.bias are exactly 2 times the reference's; every other parameter's gradient equals it".
    "" for any other pattern (a parameter off by no single factor, or every parameter off)."""
    equal: list[str] = []
    scaled: dict[float, list[str]] = {}
    for name in expected:
        if name not in actual:
            return ""
        one, want = {name: actual[name]}, {name: expected[name]}
        if first_difference(one, want) is None:
            equal.append(name)
        elif (factor := proportional(one, want)) is not None:
            scaled.setdefault(_round(factor), []).append(name)
        else:
            return ""
    if not equal or not scaled:
        return ""
    groups = [
        f"{_listed(names)} {'is' if len(names) == 1 else 'are'} exactly {fraction(factor)} the reference's"
        for factor, names in sorted(scaled.items())
    ]
    return f"{'; '.join(groups)}; every other parameter's {what} equals it ({_listed(equal)})"


@dataclass(frozen=True)
class Observation:
    """Where the run first leaves the reference, in measured terms, and the fitted values the
    hypotheses may use."""

    step: int
    phase: str  # "gradient" or "update"
    sentence: str
    fits: dict[str, float]
    measured_only: bool = False  # a fact that needs no replay (no gradient at all, nothing moved...)
    advice: str = ""  # where to look, true for any cause in this phase


class _Locator:
    def __init__(
        self, steps: Steps, start: Arrays, reference: Steps, reference_start: Arrays, setting: Setting
    ) -> None:
        self.steps, self.start = steps, start
        self.reference, self.reference_start = reference, reference_start
        self.setting = setting

    def at(self, step: int) -> str:
        label = self.setting.labels.get(step)
        return f"{self.setting.context}step {step}" + (f" ({label})" if label else "") + f", {self.setting.subject}"

    def _loss(self, step: int) -> tuple[bool, str]:
        """(whether the losses equal the reference's, a sentence when they are a multiple of them)."""
        expected = (self.setting.losses or [])[step - 1 : step]
        got = self.steps[step - 1].get("losses")
        if not expected or got is None or len(got) != len(expected[0]) or not got:
            return False, ""
        want, have = np.asarray(expected[0], dtype=np.float64), np.asarray(got, dtype=np.float64)
        if close(have, want, rtol=1e-5, atol=1e-7):
            return True, ""
        ratios = have / np.where(want == 0, np.nan, want)
        if np.all(np.isfinite(ratios)) and close(ratios, np.full_like(ratios, ratios[0]), rtol=1e-4, atol=1e-8):
            return False, (
                f"the loss backward() started from is exactly {fraction(float(ratios[0]))} the mean squared "
                "error of the batch"
            )
        return False, f"the loss backward() started from is {have[0]:.6g}, the batch's mean squared error {want[0]:.6g}"

    def gradient(self, step: int) -> Observation:
        got, want = self.steps[step - 1], self.reference[step - 1]
        grads, expected = got["grads"], want["grads"]
        at = self.at(step)
        missing = [name for name in expected if name not in grads]
        if missing:
            foreign = sum(name not in expected for name in grads)
            extra = f"; it holds {foreign} tensor(s) that are not the model's parameters" if foreign else ""
            return Observation(
                step,
                "gradient",
                f"{at}: the optimizer does not hold {', '.join(missing)}{extra}: those parameters never change; "
                "build it over all of the model's parameters",
                {},
                measured_only=True,
            )
        if got.get("no_grad") and len(got["no_grad"]) == len(grads):
            return Observation(
                step,
                "gradient",
                f"{at}: no parameter had a gradient (.grad was None) when optimizer.step() ran",
                {},
                measured_only=True,
            )
        before = "the weights before it" if step > 1 else "the starting weights"
        loss_equal, loss_sentence = self._loss(step)
        same = f"{before} and the loss equal the reference's" if loss_equal else f"{before} equal the reference's"
        fits: dict[str, float] = {}
        if _largest(grads) == 0.0 and _largest(expected) > 0.0:
            measured = "every gradient was zero when optimizer.step() ran, where the reference's are not"
        elif (scale := proportional(grads, expected)) is not None:
            fits["loss_scale"] = _round(scale)
            if scale < 1:
                fits["clip_norm"] = _round(_norm(grads))
            measured = f"the gradient at optimizer.step() is exactly {fraction(scale)} the reference's"
        elif located := by_parameter(grads, expected, "gradient"):
            measured = f"the gradient at optimizer.step() differs from the reference's ({self.setting.reference}) " + (
                f"in some parameters only: {located}"
            )
        else:
            difference = first_difference(grads, expected)
            measured = (
                f"the gradient at optimizer.step() differs from the reference's ({self.setting.reference}): "
                f"{difference}; it is not a multiple of it (least-squares ratio {scale_of(grads, expected):.3g})"
            )
        evidence = f" ({loss_sentence})" if loss_sentence else ""
        return Observation(
            step,
            "gradient",
            f"{at}: {same}; {measured}{evidence}",
            fits,
            advice="So the gradient is wrong before any step is taken: look at the loss, backward() and how the "
            "gradients are averaged across ranks",
        )

    def _updates(self, step: int) -> tuple[Arrays, Arrays]:
        before = self.steps[step - 2]["params"] if step > 1 else self.start
        reference_before = self.reference[step - 2]["params"] if step > 1 else self.reference_start
        return (
            _minus(self.steps[step - 1]["params"], before),
            _minus(self.reference[step - 1]["params"], reference_before),
        )

    def _state(self, step: int) -> str:
        """The optimizer's buffers against the reference's, when they are of other kinds."""
        got, want = self.steps[step - 1].get("state"), self.reference[step - 1].get("state")
        if not isinstance(got, dict) or not isinstance(want, dict):
            return ""
        kinds = sorted({k for buffers in got.values() if isinstance(buffers, dict) for k in buffers})
        expected = sorted({k for buffers in want.values() if isinstance(buffers, dict) for k in buffers})
        if kinds == expected:
            return ""
        kept = ", ".join(kinds) or "no state"
        return f"; the optimizer keeps {kept} where the reference's keeps {', '.join(expected)}"

    def earlier_update(self, step: int) -> Observation | None:
        """An update before `step` that differs on its own, far finer scale: weight decay of 1e-4 moves a
        weight within fp32 tolerance of itself, yet can change a later gradient beyond it."""
        for earlier in range(1, step):
            if first_difference(*self._updates(earlier)) is not None:
                return self.update(earlier)
        return None

    def update(self, step: int) -> Observation:
        at, lr, momentum = self.at(step), self.setting.lr, self.setting.momentum
        grads = self.steps[step - 1]["grads"]
        update, expected = self._updates(step)
        loss_equal, _ = self._loss(step)
        same = "the loss and the gradient equal" if loss_equal else "the gradient equals"
        same += " the reference's"
        advice = "So the gradient is right and the step is not: look at the learning rate and the optimizer"
        if _largest(update) == 0.0:
            return Observation(
                step,
                "update",
                f"{at}: {same}, but no weight changed in optimizer.step(){self._state(step)}",
                {},
                measured_only=True,
            )
        fits: dict[str, float] = {}
        scale = proportional(update, expected)
        if scale is not None:
            fits["lr_scale"] = _round(scale)
            measured = f"the update is exactly {fraction(scale)} the reference's for every parameter"
        elif located := by_parameter(update, expected, "update"):
            measured = f"the update differs from the reference's in some parameters only: {located}"
        else:
            difference = first_difference(update, expected)
            optimizer = self.setting.optimizer or f"SGD(lr={lr:g}, momentum={momentum:g})"
            measured = (
                f"the update differs from that of {optimizer} by up to "
                f"{difference.max_abs if difference else 0:.3g} ({difference.name if difference else ''}; "
                f"least-squares ratio {scale_of(update, expected):.3g})"
            )
        buffer: Arrays = {}  # the reference's momentum buffer before this step
        for earlier in self.reference[: step - 1]:
            buffer = _plus(_scaled(buffer, momentum), earlier["grads"]) if buffer else dict(earlier["grads"])
        if buffer:
            fitted = scale_of(_minus(_scaled(update, -1 / lr), grads), buffer)
            if np.isfinite(fitted) and fitted >= 0:  # momentum 1 or more is a mistake too: the replay decides
                fits["momentum"] = _round(fitted)
        new_buffer = _plus(_scaled(buffer, momentum), grads) if buffer else grads
        decayed = self._weights_in_buffer(step)
        decay = scale_of(_minus(_scaled(update, -1 / lr), new_buffer), decayed)
        if np.isfinite(decay) and decay > 0:
            fits["weight_decay"] = float(f"{decay:.2g}")
        return Observation(step, "update", f"{at}: {same}; {measured}{self._state(step)}", fits, advice=advice)

    def _weights_in_buffer(self, step: int) -> Arrays:
        """sum over steps j <= step of momentum**(step - j) * (weights before step j): what weight decay
        adds to SGD's momentum buffer at `step`, per unit of decay."""
        total: Arrays = {}
        for j in range(1, step + 1):
            weights = self.steps[j - 2]["params"] if j > 1 else self.start
            total = _plus(_scaled(total, self.setting.momentum), weights) if total else dict(weights)
        return total


def locate(
    steps: Steps, start: Arrays, reference: Steps, reference_start: Arrays, setting: Setting
) -> Observation | None:
    """The first step, and phase within it, where `steps` leaves `reference`; None if every common step
    matches. Step counts are the caller's to compare first."""
    locator = _Locator(steps, start, reference, reference_start, setting)
    for number, (got, want) in enumerate(zip(steps, reference), 1):
        if first_difference(got["grads"], want["grads"]) is not None:
            return locator.earlier_update(number) or locator.gradient(number)
        if first_difference(got["params"], want["params"]) is not None:
            return locator.update(number)
    return None


def diagnose(
    steps: Steps, start: Arrays, reference: Steps, reference_start: Arrays, setting: Setting
) -> Finding | None:
    """None if every common step matches; else what was measured where the run first leaves the
    reference, naming a cause only when exactly one hypothesis' replay reproduces every step."""
    observation = locate(steps, start, reference, reference_start, setting)
    if observation is None:
        return None
    plain = f"{observation.sentence}. {observation.advice}" if observation.advice else observation.sentence
    if observation.measured_only or setting.replay is None or not setting.hypotheses:
        return Finding(plain, observation.step)
    numbers = {name: float(value) for name, value in setting.factors.items()}
    numbers |= {"lr": setting.lr, "momentum": setting.momentum}
    proof = prove(
        setting.hypotheses,
        numbers,
        observation.fits,
        setting.replay,
        lambda replayed: reproduces(steps, replayed, start),
    )
    named = proof.named
    recorded = f"replaying it on the reference reproduces all {len(steps)} recorded steps"
    if named is not None:
        hypothesis, says = named
        return Finding(
            f"{says}. Measured: {observation.sentence}; {recorded}", observation.step, hypothesis.hint, proof.cause
        )
    if proof.proven:
        candidates = "; ".join(says for _, says in proof.proven)
        return Finding(
            f"{plain}. Each of these reproduces every step, and this run's numbers cannot tell them apart: "
            f"{candidates}",
            observation.step,
        )
    return Finding(plain, observation.step)


def _joined(
    per_rank: list[list[dict]], number: int, kind: str, layouts: dict[str, list]
) -> dict[str, np.ndarray] | None:
    """Every named tensor of one step, its pieces joined in rank order; an FSDP1 flat parameter is
    split into the parameters it holds (its layout: [name or None for padding, numel] in order)."""
    names = per_rank[0][number].get(kind, {})
    joined: dict[str, np.ndarray] = {}
    for name in names:
        pieces = [steps[number].get(kind, {}).get(name) for steps in per_rank]
        if any(piece is None for piece in pieces):
            return None
        whole = np.concatenate([np.asarray(piece).ravel() for piece in pieces])
        if name not in layouts:
            joined[name] = whole
            continue
        prefix = name.rpartition(".")[0]
        offset = 0
        for inner, numel in layouts[name]:
            if inner is not None:
                joined[f"{prefix}.{inner}" if prefix else inner] = whole[offset : offset + numel]
            offset += numel
    return joined


def gathered_steps(
    per_rank: list[list[dict]], shapes: dict[str, tuple[int, ...]], layouts: dict[str, list] | None = None
) -> list[dict] | None:
    """Whole-tensor steps from the flat pieces every rank recorded (training.ShardStepRecorder),
    joined in rank order; None when the pieces do not make the whole tensors."""
    counts = {len(steps) for steps in per_rank}
    if len(counts) != 1:
        return None
    whole = []
    for number in range(counts.pop()):
        step = {}
        for kind in ("grads", "params"):
            joined = _joined(per_rank, number, kind, layouts or {})
            if joined is None or any(
                name not in joined or joined[name].size != int(np.prod(shape)) for name, shape in shapes.items()
            ):
                return None
            step[kind] = {name: joined[name].reshape(shape) for name, shape in shapes.items()}
        whole.append(step)
    return whole
