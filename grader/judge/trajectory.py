"""One diagnosis of a training trajectory against its reference, shared by the training checks.

A trajectory is the list of optimizer steps one rank took: the gradient each step used and the
parameters after it. The first step that differs from the reference is found, and a cause is named
only from its signature in the numbers of that step (docs/maintainers/DIAGNOSES.md lists them):

- the gradient is exactly c times the reference's, c one of the run's named numbers (the batch
  size b, the world size W, the accumulation steps k) or its inverse; or it is zero, or it is the
  previous step's plus this step's own (never cleared), or it equals a probe the exercise computed
  (one rank's batch alone, the last micro-batch alone), or it was rescaled to a round norm (clipped);
- the gradient is right and the update is not: exactly c times the reference's (the learning rate),
  -lr * gradient after the first step (no momentum), another momentum, Nesterov, weight decay, every
  weight moved by exactly lr (Adam's first step), or nothing moved.

When no signature fits, the message says what was measured and what was expected, and where the
first difference appears (the first step, the first of an epoch, the first after resuming...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grader.judge.compare import Arrays, first_difference, scale_of


@dataclass(frozen=True)
class Finding:
    cause: str  # the signature found ("loss_summed", "no_momentum", ...); "measured" when none fits
    message: str
    step: int = 0


@dataclass(frozen=True)
class Probe:
    """A gradient the exercise computed for a known mistake at one step, and what to say if it fits."""

    step: int
    grads: Arrays
    cause: str
    message: str


@dataclass(frozen=True)
class Setting:
    lr: float
    momentum: float
    factors: dict[str, int]  # the run's numbers a scale can be named after: {"b": 8, "W": 2}
    reference: str  # what the reference is, for plain messages
    labels: dict[int, str] = field(default_factory=dict)  # step -> where it is ("the first step of epoch 1")
    context: str = ""  # prefixed to the measurement ("with k=2, ")
    probes: tuple[Probe, ...] = ()


# (factor, power) -> (cause, headline, why): the signature of an exact gradient ratio
_GRADIENT_SCALES = {
    ("b", 1): ("loss_summed", "loss summed, not averaged", "the batch size b = {v}; use the mean loss"),
    ("b", -1): (
        "divided_by_b",
        "loss divided by the batch size twice",
        "1/b for b = {v}: the mean loss already divides by the batch size",
    ),
    ("W", 1): (
        "summed_over_ranks",
        "gradients summed across ranks, not averaged",
        "the world size W = {v}: DDP and FSDP already average the gradients over the ranks",
    ),
    ("W", -1): (
        "divided_by_world_size",
        "gradient divided by the world size on top of the average over ranks",
        "1/W for W = {v}: DDP and FSDP already average the gradients over the ranks",
    ),
    ("k", 1): (
        "loss_not_divided_by_k",
        "loss not divided by k",
        "k = {v}: the k micro-batch gradients add up; divide each micro-batch loss by k",
    ),
    ("k", -1): (
        "divided_by_k_twice",
        "loss divided by k twice",
        "1/k for k = {v}: divide each micro-batch loss by k once",
    ),
}
_UPDATE_SCALES = {
    ("W", 1): ("lr_times_world_size", "learning rate scaled by the world size"),
    ("W", -1): ("lr_over_world_size", "learning rate divided by the world size"),
    ("k", 1): ("lr_times_k", "learning rate scaled by k"),
    ("k", -1): ("lr_over_k", "learning rate divided by k"),
    ("b", 1): ("lr_times_batch", "learning rate scaled by the batch size"),
}
_ROUND_NORMS = sorted({m * 10.0**e for m in (1, 2, 2.5, 5) for e in range(-3, 3)})


def _scaled(arrays: Arrays, factor: float) -> Arrays:
    return {name: factor * value for name, value in arrays.items()}


def _plus(a: Arrays, b: Arrays) -> Arrays:
    return {name: a[name] + b[name] for name in b if name in a}


def _minus(a: Arrays, b: Arrays) -> Arrays:
    return {name: a[name] - b[name] for name in b if name in a}


def _close(actual: Arrays, expected: Arrays) -> bool:
    return first_difference(actual, expected) is None


def _largest(arrays: Arrays) -> float:
    return max((float(np.max(np.abs(v))) for v in arrays.values() if np.size(v)), default=0.0)


def _norm(arrays: Arrays) -> float:
    return float(np.sqrt(sum(float(np.sum(np.square(v, dtype=np.float64))) for v in arrays.values())))


def _fraction(value: float) -> str:
    if value >= 1:
        return f"{value:.4g} times"
    inverse = 1 / value
    return f"1/{round(inverse)} of" if abs(inverse - round(inverse)) < 1e-3 else f"{value:.4g} times"


class _Diagnosis:
    def __init__(
        self, steps: list[dict], start: Arrays, reference: list[dict], reference_start: Arrays, setting: Setting
    ) -> None:
        self.steps, self.start = steps, start
        self.reference, self.reference_start = reference, reference_start
        self.setting = setting

    def at(self, step: int) -> str:
        label = self.setting.labels.get(step)
        return f"at step {step}" + (f" ({label})" if label else "")

    def _exact_factor(self, actual: Arrays, expected: Arrays, table: dict) -> list[tuple[str, int, int]]:
        """The named factors (name, power, value) for which actual == value**power * expected."""
        return [
            (name, power, value)
            for (name, power) in table
            if (value := self.setting.factors.get(name))
            and value != 1
            and _close(actual, _scaled(expected, float(value) ** power))
        ]

    def _weights_in_buffer(self, step: int) -> Arrays:
        """sum over steps j <= step of momentum**(step - j) * (weights before step j): what weight decay
        adds to SGD's momentum buffer at `step`, per unit of decay."""
        total: Arrays = {}
        for j in range(1, step + 1):
            weights = self.steps[j - 2]["params"] if j > 1 else self.start
            total = _plus(_scaled(total, self.setting.momentum), weights) if total else dict(weights)
        return total

    # --- the gradient differs ------------------------------------------------------------
    def gradient(self, step: int) -> Finding:
        got, want = self.steps[step - 1], self.reference[step - 1]
        grads, expected = got["grads"], want["grads"]
        at, context = self.at(step), self.setting.context
        missing = [name for name in expected if name not in grads]
        if missing:
            foreign = sum(name not in expected for name in grads)
            extra = f"; it holds {foreign} tensor(s) that are not the model's parameters" if foreign else ""
            return Finding(
                "optimizer_parameters",
                f"the optimizer does not hold {', '.join(missing)}{extra}: those "
                "parameters never change; build it over all of the model's parameters",
                step,
            )
        if got.get("no_grad") and len(got["no_grad"]) == len(grads):
            return Finding(
                "no_gradient",
                f"{context}{at} no parameter had a gradient (.grad was None) when optimizer.step() ran",
                step,
            )
        if _largest(grads) == 0.0 and _largest(expected) > 0.0:
            return Finding(
                "zero_gradient",
                f"{context}{at} every gradient was zero when optimizer.step() ran, where the reference's are not",
                step,
            )
        for probe in self.setting.probes:
            if probe.step == step and _close(grads, probe.grads):
                return Finding(probe.cause, probe.message, step)
        if step > 1 and _close(grads, _plus(self.steps[step - 2]["grads"], expected)):
            return Finding(
                "gradients_not_cleared",
                f"gradients never cleared: {context}the gradient {at} is step "
                f"{step - 1}'s plus step {step}'s own; call optimizer.zero_grad() once per step",
                step,
            )
        named = self._exact_factor(grads, expected, _GRADIENT_SCALES)
        if len(named) == 1:
            name, power, value = named[0]
            cause, headline, why = _GRADIENT_SCALES[(name, power)]
            ratio = f"{value} times" if power == 1 else f"1/{value} of"
            return Finding(
                cause,
                f"{headline}: {context}the gradient {at} is exactly {ratio} the reference's, {why.format(v=value)}",
                step,
            )
        scale = scale_of(grads, expected)
        # a ratio of 1 is no scale: a gradient that merely drifts (from weights that drifted) is not "1/1 of" it
        proportional = (
            np.isfinite(scale) and scale > 0 and abs(scale - 1) > 1e-3 and _close(grads, _scaled(expected, scale))
        )
        if len(named) > 1:
            names = " = ".join(name for name, _, _ in named)
            return Finding(
                "ambiguous_scale",
                f"{context}the gradient {at} is exactly {_fraction(scale)} the "
                f"reference's ({names} here, so the numbers cannot tell which)",
                step,
            )
        if proportional and scale < 1:
            norm = _norm(grads)
            bound = next((r for r in _ROUND_NORMS if abs(norm - r) <= 1e-4 * r), None)
            if bound is not None:
                return Finding(
                    "gradient_clipped",
                    f"gradient clipped: {context}the gradient {at} is exactly "
                    f"{scale:.4g} times the reference's, rescaled to a norm of {bound:g}; the reference "
                    "does not clip",
                    step,
                )
        if proportional:
            return Finding(
                "measured",
                f"{context}the gradient {at} is exactly {_fraction(scale)} the reference's "
                f"({self.setting.reference}), where it should be equal",
                step,
            )
        difference = first_difference(grads, expected)
        return Finding(
            "measured",
            f"{context}the gradient {at} differs from the reference's "
            f"({self.setting.reference}): {difference}; it is not a multiple of it "
            f"(least-squares ratio {scale:.3g})",
            step,
        )

    # --- the gradient is right, the update is not ------------------------------------------
    def _updates(self, step: int) -> tuple[Arrays, Arrays]:
        """(this trajectory's update at `step`, the reference's)."""
        before = self.steps[step - 2]["params"] if step > 1 else self.start
        reference_before = self.reference[step - 2]["params"] if step > 1 else self.reference_start
        return (
            _minus(self.steps[step - 1]["params"], before),
            _minus(self.reference[step - 1]["params"], reference_before),
        )

    def earlier_update(self, step: int) -> Finding | None:
        """A named mistake in an update before `step`: one too small to show in the weights (weight
        decay 1e-4 moves a weight by lr * 1e-4 of itself, within fp32 tolerance of the weight) can
        still change a later gradient beyond it. Updates are compared on their own, far finer scale."""
        for earlier in range(1, step):
            if first_difference(*self._updates(earlier)) is not None:
                found = self.update(earlier)
                return found if found.cause != "measured" else None
        return None

    def update(self, step: int) -> Finding:
        setting, at, context = self.setting, self.at(step), self.setting.context
        lr, momentum = setting.lr, setting.momentum
        grads = self.steps[step - 1]["grads"]
        update, expected = self._updates(step)
        buffer: Arrays = {}  # the reference's momentum buffer before this step
        for earlier in self.reference[: step - 1]:
            buffer = _plus(_scaled(buffer, momentum), earlier["grads"]) if buffer else dict(earlier["grads"])
        headline = f"{context}the gradient {at} is right, but the update is not"
        if _largest(update) == 0.0:
            return Finding("no_update", f"{headline}: no weight changed in optimizer.step()", step)
        if step > 1 and _close(update, _scaled(grads, -lr)):
            return Finding(
                "no_momentum",
                f"momentum missing: {context}steps 1 to {step - 1} match, but the update "
                f"{at} is -lr * gradient, plain SGD; use SGD(..., momentum={momentum:g})",
                step,
            )
        if buffer:
            residual = _minus(_scaled(update, -1 / lr), grads)
            fitted = scale_of(residual, buffer)
            if (
                np.isfinite(fitted)
                and abs(fitted - momentum) > 1e-3
                and _close(update, _scaled(_plus(_scaled(buffer, fitted), grads), -lr))
            ):
                return Finding(
                    "other_momentum",
                    f"momentum {fitted:.3g} instead of {momentum:g}: {context}the update "
                    f"{at} fits SGD with momentum {fitted:.3g}",
                    step,
                )
        new_buffer = _plus(_scaled(buffer, momentum), grads) if buffer else grads
        if momentum and _close(update, _scaled(_plus(grads, _scaled(new_buffer, momentum)), -lr)):
            return Finding(
                "nesterov",
                f"Nesterov momentum: {context}the update {at} is SGD's with nesterov=True; "
                "the reference uses plain momentum",
                step,
            )
        decayed = self._weights_in_buffer(step)  # what weight decay adds to the buffer, per unit of decay
        decay = scale_of(_minus(_scaled(update, -1 / lr), new_buffer), decayed)
        decayed_update = _scaled(_plus(new_buffer, _scaled(decayed, decay)), -lr)
        if np.isfinite(decay) and decay > 0 and _close(update, decayed_update):
            # two digits: the fit rests on the update's fp32 rounding, a few parts in a thousand
            return Finding(
                "weight_decay",
                f"weight decay {decay:.2g}: {context}the update {at} fits SGD with "
                f"weight_decay={decay:.2g}; the reference has no weight decay",
                step,
            )
        if step == 1:
            moved = np.concatenate([np.abs(v).ravel() for v in update.values()])
            steep = np.concatenate([np.abs(v).ravel() for v in grads.values()]) > 1e-4
            if steep.any() and np.allclose(moved[steep], lr, rtol=1e-3):
                return Finding(
                    "adam_like",
                    f"another optimizer: {context}{at} every weight with a gradient moved by "
                    f"exactly lr = {lr:g}, whatever its gradient: Adam's first step, not SGD's",
                    step,
                )
        named = self._exact_factor(update, expected, _UPDATE_SCALES)
        if len(named) > 1:
            names = " = ".join(name for name, _, _ in named)
            return Finding(
                "ambiguous_scale",
                f"{headline}: it is exactly {_fraction(scale_of(update, expected))} the "
                f"reference's ({names} here, so the numbers cannot tell which)",
                step,
            )
        if len(named) == 1:
            name, power, value = named[0]
            cause, headline_scale = _UPDATE_SCALES[(name, power)]
            ratio = f"{value} times" if power == 1 else f"1/{value} of"
            effective = lr * float(value) ** power
            return Finding(
                cause,
                f"{headline_scale}: {headline}: it is exactly {ratio} the reference's, an effective "
                f"learning rate of {effective:g} instead of {lr:g}; use the lr given",
                step,
            )
        scale = scale_of(update, expected)
        if np.isfinite(scale) and scale > 0 and _close(update, _scaled(expected, scale)):
            return Finding(
                "learning_rate",
                f"{headline}: it is exactly {_fraction(scale)} the reference's, an "
                f"effective learning rate of {lr * scale:.4g} instead of {lr:g}",
                step,
            )
        difference = first_difference(update, expected)
        return Finding(
            "measured",
            f"{headline}: the update differs from that of SGD(lr={lr:g}, momentum="
            f"{momentum:g}) by up to {difference.max_abs if difference else 0:.3g} "
            f"({difference.name if difference else ''}; least-squares ratio {scale:.3g})",
            step,
        )


def diagnose(
    steps: list[dict], start: Arrays, reference: list[dict], reference_start: Arrays, setting: Setting
) -> Finding | None:
    """The first step where `steps` (each {"grads", "params"}) leaves `reference`, and why; None if
    every common step matches. Step counts are the caller's to compare first."""
    diagnosis = _Diagnosis(steps, start, reference, reference_start, setting)
    for number, (got, want) in enumerate(zip(steps, reference), 1):
        if first_difference(got["grads"], want["grads"]) is not None:
            return diagnosis.earlier_update(number) or diagnosis.gradient(number)
        if first_difference(got["params"], want["params"]) is not None:
            return diagnosis.update(number)
    return None


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
