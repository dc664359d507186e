"""Judging exercise 10: each formula against its closed form on a grid of inputs that includes
the limits (one worker, serial or fully parallel work, one rank, a huge W) and published figures
(the ZeRO paper's 7.5B parameters on 64 GPUs).

Each check evaluates only its own functions (one small job each), and names the usual wrong
formula from the numbers it gave. The right values come from `expected`: the closed forms
(answers.py, a secret) in the course, the table of the public probes in a student copy; the check
at random inputs, which only the closed forms can judge, is hidden (hidden.py).
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import math
from pathlib import Path
from typing import Any

from grader.checks.ex10_scaling.probes import BAD_ZERO_STAGES, PROBES, random_probes
from grader.judge.api import CheckContext, check

REL = 1e-6
TABLE = Path(__file__).with_name("expected.json")  # written by `grader release` into a student copy


@functools.cache
def _public_table() -> dict[tuple, float]:
    entries = json.loads(TABLE.read_text())
    return {(name, *map(float, row[:-1])): row[-1] for name, rows in entries.items() for row in rows}


def expected(name: str, *args: float) -> float:
    """The right value of `name` at `args`: closed forms where the course has them, else the table."""
    if importlib.util.find_spec("grader.checks.ex10_scaling.answers") is not None:
        from grader.checks.ex10_scaling.answers import CLOSED_FORMS

        return CLOSED_FORMS[name](*args)
    return _public_table()[(name, *map(float, args))]


def _values(ctx: CheckContext, *names: str, seed: int | None = None) -> dict[str, dict[tuple, Any]]:
    """Per function, {arguments: value} on the grader's probes (the fixed grid, or seed's random ones)."""
    [facts] = ctx.facts("evaluate", nprocs=1, names=list(names), seed=seed)
    probes = PROBES if seed is None else random_probes(seed)
    values = {name: dict(zip(probes[name], facts[name])) for name in names}
    for name, table in values.items():
        for args, value in table.items():
            if not isinstance(value, float) or not math.isfinite(value):
                shown = value["raised"] if isinstance(value, dict) else f"returned {value}"
                raise ctx.fail(f"{name}{args}: {shown}; a finite number was expected")
    if "bad_stage" in facts:
        values["bad_stage"] = {(stage,): outcome for stage, outcome in zip(BAD_ZERO_STAGES, facts["bad_stage"])}
    return values


def _close(value: float, expected: float) -> bool:
    return math.isclose(value, expected, rel_tol=REL, abs_tol=1e-12)


def _warmup_mistake(got: float, step: int, target: float) -> str:
    """The off-by-one warmups, recognized from the rate at one step (warmup_steps = 5, base_lr = 0.1)."""

    def linear(position: float, length: int) -> float:
        return 0.1 + (target - 0.1) * min(position / length, 1.0)

    if _close(got, linear(step + 1, 5)):
        return f": off by one step, it is the rate of step {step + 1} (steps count from 0, where the rate is base_lr)"
    if _close(got, linear(step, 4)):
        return ": the warmup reaches the target one step early (divided by warmup_steps - 1)"
    if _close(got, linear(step, 6)):
        return ": the warmup reaches the target one step late (divided by warmup_steps + 1)"
    return ""


@check("lr_schedule")
def lr_schedule(ctx: CheckContext) -> None:
    lr = _values(ctx, "scaled_lr")["scaled_lr"]
    after = lr[(0.1, 256, 1024, 7, 5)]
    if _close(after, 0.2):
        raise ctx.fail(
            "square-root scaling: 4x the batch gave 2x the learning rate (0.2); the linear rule "
            "multiplies the rate by the batch ratio (0.4)",
            hint="linear_scaling",
        )
    if not _close(after, 0.4):
        raise ctx.fail(
            f"scaled_lr(0.1, 256, 1024, step=7, warmup_steps=5) = {after:.6g}; after warmup the "
            "linear rule gives 0.1 x 1024/256 = 0.4",
            hint="linear_scaling",
        )
    start = lr[(0.1, 256, 1024, 0, 5)]
    if _close(start, 0.4):
        raise ctx.fail(
            "no warmup: the rate is already 0.4 at step 0; it should climb from base_lr (0.1) to "
            "0.4 over the first 5 steps",
            hint="warmup",
        )
    if _close(start, 0.0):
        raise ctx.fail("warmup from zero: the rate is 0 at step 0; the warmup starts at base_lr (0.1)", hint="warmup")
    for batch in (256, 512, 1024, 8192):
        target = expected("scaled_lr", 0.1, 256, batch, 5, 5)
        for step in range(8):
            want = expected("scaled_lr", 0.1, 256, batch, step, 5)
            got = lr[(0.1, 256, batch, step, 5)]
            if not _close(got, want):
                call = f"scaled_lr(0.1, 256, {batch}, step={step}, warmup_steps=5) = {got:.6g}, expected {want:.6g}"
                raise ctx.fail(
                    f"{call}{_warmup_mistake(got, step, target)} (linear from 0.1 at step 0 to {target:g} at step 5)",
                    hint="warmup",
                )
    for step in (0, 3):
        got = lr[(0.1, 256, 1024, step, 0)]
        if not _close(got, 0.4):
            raise ctx.fail(
                f"with warmup_steps=0 the rate is the target from step 0: scaled_lr(0.1, 256, 1024, "
                f"{step}, 0) = {got:.6g} instead of 0.4 (no division by zero either)",
                hint="warmup",
            )


@check("effective_batch")
def effective_batch(ctx: CheckContext) -> None:
    table = _values(ctx, "effective_batch")["effective_batch"]
    for (batch, world, accumulation), got in table.items():
        if _close(got, expected("effective_batch", batch, world, accumulation)):
            continue
        if _close(got, batch * world):
            raise ctx.fail(
                f"gradient accumulation ignored: effective_batch({batch}, {world}, {accumulation}) = "
                f"{got:g}; each optimizer step sees {accumulation} micro-batches per GPU",
                hint="global_batch",
            )
        if _close(got, batch * accumulation):
            raise ctx.fail(
                f"world size ignored: effective_batch({batch}, {world}, {accumulation}) = {got:g}; "
                f"every one of the {world} GPUs contributes its batch to the step",
                hint="global_batch",
            )
        raise ctx.fail(
            f"effective_batch({batch}, {world}, {accumulation}) = {got:g}, expected "
            f"{expected('effective_batch', batch, world, accumulation):g}",
            hint="global_batch",
        )


@check("amdahl")
def amdahl(ctx: CheckContext) -> None:
    values = _values(ctx, "amdahl_speedup", "parallel_efficiency")
    speedup, efficiency = values["amdahl_speedup"], values["parallel_efficiency"]
    if _close(speedup[(0.9, 8)], 1 / (0.9 + 0.1 / 8)):
        raise ctx.fail(
            "the serial and parallel fractions are swapped: amdahl_speedup(0.9, 8) = "
            f"{speedup[(0.9, 8)]:.4g}; with 90% parallel work 8 workers give 1/(0.1 + 0.9/8) = 4.706",
            hint="amdahl",
        )
    wrong = {(p, n): got for (p, n), got in speedup.items() if not _close(got, expected("amdahl_speedup", p, n))}
    if wrong and all(_close(got, 1.0) for got in speedup.values()):
        raise ctx.fail(
            "amdahl_speedup is 1 for every n: the parallel fraction p is never divided by n (1/((1-p) + p/n))",
            hint="amdahl",
        )
    if wrong and all(_close(got, (1 - p) + p * n) for (p, n), got in speedup.items()):
        raise ctx.fail(
            f"Gustafson's scaled speedup, (1-p) + p x n, instead of Amdahl's: amdahl_speedup(0.9, 8) = "
            f"{speedup[(0.9, 8)]:.4g}; Amdahl fixes the problem size: 1/((1-p) + p/n) = 4.706",
            hint="amdahl",
        )
    for (p, n), got in wrong.items():
        want = expected("amdahl_speedup", p, n)
        raise ctx.fail(f"amdahl_speedup({p}, {n}) = {got:.6g}, expected 1/((1-p) + p/n) = {want:.6g}", hint="amdahl")
    for (p, n), got in efficiency.items():
        want = expected("parallel_efficiency", p, n)
        if not _close(got, want):
            speedup_n = want * n
            wrong_forms = (
                ("speedup x n", speedup_n * n),
                ("n / speedup", n / speedup_n),
                ("the speedup itself, not divided by n", speedup_n),
            )
            why = next((f": it is {name}" for name, value in wrong_forms if _close(got, value)), "")
            raise ctx.fail(
                f"parallel_efficiency({p}, {n}) = {got:.6g}, expected speedup / n = {want:.6g}{why}", hint="amdahl"
            )


def _volume_mistake(got: float, message: float, world: int) -> str:
    """The wrong ring volumes, recognized from their ratio to the message size M."""
    ring = 2 * (world - 1) / world * message
    wrong_volumes = (
        ("(W-1) x M: whole messages to every other rank, a naive all-to-all", (world - 1) * message),
        ("2M: the (W-1)/W factor is missing (with one rank nothing is sent)", 2 * message),
        ("2(W-1) x M: the whole message at every step instead of a 1/W chunk", 2 * (world - 1) * message),
        ("(W-1)/W x M: one phase only (the reduce-scatter or the all-gather; the ring does both)", ring / 2),
        ("8 x 2(W-1)/W x M: bits, not bytes", 8 * ring),
    )
    return next((name for name, value in wrong_volumes if _close(got, value) and not _close(value, ring)), "")


@check("allreduce_cost")
def allreduce_cost(ctx: CheckContext) -> None:
    values = _values(ctx, "ring_allreduce_bytes", "allreduce_seconds")
    volume, seconds = values["ring_allreduce_bytes"], values["allreduce_seconds"]
    for (message, world), got in volume.items():
        want = expected("ring_allreduce_bytes", message, world)
        if _close(got, want):
            continue
        named = _volume_mistake(got, message, world)
        raise ctx.fail(
            f"ring_allreduce_bytes({message:g}, {world}) = {got:.6g}{' = ' + named if named else ''}; "
            f"the ring sends 2(W-1)/W x M = {want:.6g}, almost 2M for any W",
            hint="ring_traffic",
        )
    for (message, world, bandwidth), got in seconds.items():
        want = expected("allreduce_seconds", message, world, bandwidth)
        if _close(got, want):
            continue
        call = f"allreduce_seconds({message:g}, {world}, {bandwidth:g}) = {got:.6g}"
        if _close(got, want * 8):
            raise ctx.fail(
                f"{call}: 8 times too slow; the bandwidth is in bytes per second, not bits", hint="ring_traffic"
            )
        if _close(got, want / 8):
            raise ctx.fail(
                f"{call}: 8 times too fast; the bandwidth is already in bytes per second (do not convert it to bits)",
                hint="ring_traffic",
            )
        named = _volume_mistake(got * bandwidth, message, world)
        sending = f": the time of sending {named}" if named else ""
        raise ctx.fail(
            f"{call}{sending}; expected the ring's volume over the bandwidth, {want:.6g} s", hint="ring_traffic"
        )


ZERO_PARTS = ("weights", "gradients", "optimizer state")
ZERO_STAGES = (0, 1, 2, 3)


def _divisions(table: dict[tuple, float], stage: int, k: int, sizes: tuple[int, int, int]) -> list[tuple[bool, ...]]:
    """Every way of dividing (weights, gradients, optimizer state) by W that, at these bytes per
    parameter, gives all the values the function returned for `stage` and K."""
    rows = [(params, world, got) for (params, world, s, kk), got in table.items() if (s, kk) == (stage, k)]
    return [
        divided
        for divided in itertools.product((False, True), repeat=3)
        if all(
            _close(got, params * sum(b / world if d else b for b, d in zip(sizes, divided)))
            for params, world, got in rows
        )
    ]


def _right_division(stage: int) -> tuple[bool, bool, bool]:
    """Whether ZeRO `stage` divides (weights, gradients, optimizer state) by W."""
    return stage >= 3, stage >= 2, stage >= 1


def _zero_mistake(table: dict[tuple, float], stage: int, k: int) -> str:
    """Which parts a wrong ZeRO formula shards, and at how many bytes each: the bytes per weight and
    gradient (2 or 4) under which every stage's values are some division of the three parts by W, the
    right division in as many stages as possible (one stage alone can be ambiguous), then the division
    that gives this stage's values."""
    explanations = []
    for weight_bytes, grad_bytes in itertools.product((2, 4), repeat=2):
        sizes = (weight_bytes, grad_bytes, k)
        fits = [_divisions(table, s, k, sizes) for s in ZERO_STAGES]
        if all(fits):
            wrong_stages = sum(_right_division(s) not in fit for s, fit in zip(ZERO_STAGES, fits))
            explanations.append((wrong_stages, sizes, fits[stage]))
    if not explanations:
        return ""
    _, sizes, stage_fits = min(explanations, key=lambda explanation: explanation[0])
    right = _right_division(stage)
    divided = right if right in stage_fits else stage_fits[0]
    fp32 = [part for part, b in zip(ZERO_PARTS, sizes[:2]) if b == 4]
    wide = f"{' and '.join(fp32)} at 4 bytes (mixed precision keeps them in 2)" if fp32 else ""
    if divided == right:
        return f": it counts {wide}" if wide else ""
    sharded = ", ".join(part for part, d in zip(ZERO_PARTS, divided) if d) or "nothing"
    should = ", ".join(part for part, d in zip(ZERO_PARTS, right) if d) or "nothing"
    return f": it divides {sharded} by W{', with ' + wide if wide else ''}; stage {stage} divides {should}"


@check("zero_memory")
def zero_memory(ctx: CheckContext) -> None:
    values = _values(ctx, "zero_memory_per_gpu")
    table, bad = values["zero_memory_per_gpu"], values["bad_stage"]
    for (params, world, stage, k), got in table.items():
        want = expected("zero_memory_per_gpu", params, world, stage, k)
        if _close(got, want):
            continue
        call = f"zero_memory_per_gpu({params:g}, {world}, stage={stage}, optimizer_bytes={k})"
        if k != 12 and _close(got, expected("zero_memory_per_gpu", params, world, stage, 12)):
            raise ctx.fail(
                f"{call} = {got / 1e9:.4g} GB: optimizer_bytes is ignored (K = 12 hard-coded)", hint="zero_memory"
            )
        for other in (0, 1, 2, 3):
            if other != stage and _close(got, expected("zero_memory_per_gpu", params, world, other, k)):
                raise ctx.fail(
                    f"{call} = {got / 1e9:.4g} GB, which is stage {other}'s memory; stage {stage} should "
                    f"give {want / 1e9:.4g} GB (stage 1 shards the optimizer state, 2 also the "
                    "gradients, 3 also the weights)",
                    hint="zero_memory",
                )
        for unit, size in (("GB", 1e9), ("GiB", 2.0**30)):
            if _close(got * size, want):
                raise ctx.fail(
                    f"{call} = {got:.6g}: that is {unit}, the function returns bytes ({want:.6g})", hint="zero_memory"
                )
        raise ctx.fail(
            f"{call} = {got / 1e9:.4g} GB{_zero_mistake(table, stage, k)}, expected {want / 1e9:.4g} GB",
            hint="zero_memory",
        )
    for (stage,), outcome in bad.items():
        if not (isinstance(outcome, dict) and outcome["raised"].startswith("ValueError")):
            shown = outcome["raised"] if isinstance(outcome, dict) else f"returned {outcome}"
            raise ctx.fail(
                f"zero_memory_per_gpu(1e9, 8, stage={stage}): {shown}; an unknown stage should raise ValueError",
                hint="zero_memory",
            )
