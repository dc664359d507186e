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
import json
import math
from pathlib import Path
from typing import Any

from grader.checks.api import CheckContext, check
from grader.checks.ex10_scaling.probes import BAD_ZERO_STAGES, PROBES, random_probes

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
        values["bad_stage"] = dict(zip(BAD_ZERO_STAGES, facts["bad_stage"]))
    return values


def _close(value: float, expected: float) -> bool:
    return math.isclose(value, expected, rel_tol=REL, abs_tol=1e-12)


@check("lr_schedule")
def lr_schedule(ctx: CheckContext) -> None:
    lr = _values(ctx, "scaled_lr")["scaled_lr"]
    after = lr[(0.1, 256, 1024, 7, 5)]
    if _close(after, 0.2):
        raise ctx.fail("square-root scaling: 4x the batch gave 2x the learning rate (0.2); the linear rule "
                       "multiplies the rate by the batch ratio (0.4)", hint=1)
    if not _close(after, 0.4):
        raise ctx.fail(f"scaled_lr(0.1, 256, 1024, step=7, warmup_steps=5) = {after:.6g}; after warmup the "
                       "linear rule gives 0.1 x 1024/256 = 0.4", hint=1)
    start = lr[(0.1, 256, 1024, 0, 5)]
    if _close(start, 0.4):
        raise ctx.fail("no warmup: the rate is already 0.4 at step 0; it should climb from base_lr (0.1) to "
                       "0.4 over the first 5 steps", hint=2)
    if _close(start, 0.0):
        raise ctx.fail("warmup from zero: the rate is 0 at step 0; the warmup starts at base_lr (0.1)", hint=2)
    for batch in (256, 512, 1024, 8192):
        target = expected("scaled_lr", 0.1, 256, batch, 5, 5)
        for step in range(8):
            want = expected("scaled_lr", 0.1, 256, batch, step, 5)
            got = lr[(0.1, 256, batch, step, 5)]
            if not _close(got, want):
                raise ctx.fail(f"scaled_lr(0.1, 256, {batch}, step={step}, warmup_steps=5) = {got:.6g}, expected "
                               f"{want:.6g} (linear from 0.1 at step 0 to {target:g} at step 5)", hint=2)
    for step in (0, 3):
        got = lr[(0.1, 256, 1024, step, 0)]
        if not _close(got, 0.4):
            raise ctx.fail(f"with warmup_steps=0 the rate is the target from step 0: scaled_lr(0.1, 256, 1024, "
                           f"{step}, 0) = {got:.6g} instead of 0.4 (no division by zero either)", hint=2)


@check("effective_batch")
def effective_batch(ctx: CheckContext) -> None:
    table = _values(ctx, "effective_batch")["effective_batch"]
    for (batch, world, accumulation), got in table.items():
        if _close(got, expected("effective_batch", batch, world, accumulation)):
            continue
        if _close(got, batch * world):
            raise ctx.fail(f"gradient accumulation ignored: effective_batch({batch}, {world}, {accumulation}) = "
                           f"{got:g}; each optimizer step sees {accumulation} micro-batches per GPU", hint=3)
        if _close(got, batch * accumulation):
            raise ctx.fail(f"world size ignored: effective_batch({batch}, {world}, {accumulation}) = {got:g}; "
                           f"every one of the {world} GPUs contributes its batch to the step", hint=3)
        raise ctx.fail(f"effective_batch({batch}, {world}, {accumulation}) = {got:g}, expected "
                       f"{expected('effective_batch', batch, world, accumulation):g}", hint=3)


@check("amdahl")
def amdahl(ctx: CheckContext) -> None:
    values = _values(ctx, "amdahl_speedup", "parallel_efficiency")
    speedup, efficiency = values["amdahl_speedup"], values["parallel_efficiency"]
    if _close(speedup[(0.9, 8)], 1 / (0.9 + 0.1 / 8)):
        raise ctx.fail("the serial and parallel fractions are swapped: amdahl_speedup(0.9, 8) = "
                       f"{speedup[(0.9, 8)]:.4g}; with 90% parallel work 8 workers give 1/(0.1 + 0.9/8) = 4.706",
                       hint=4)
    for (p, n), got in speedup.items():
        want = expected("amdahl_speedup", p, n)
        if not _close(got, want):
            raise ctx.fail(f"amdahl_speedup({p}, {n}) = {got:.6g}, expected 1/((1-p) + p/n) = {want:.6g}", hint=4)
    for (p, n), got in efficiency.items():
        want = expected("parallel_efficiency", p, n)
        if not _close(got, want):
            why = " (speedup x n instead of / n?)" if _close(got, want * n * n) else ""
            raise ctx.fail(f"parallel_efficiency({p}, {n}) = {got:.6g}, expected speedup / n = {want:.6g}{why}", hint=4)


@check("allreduce_cost")
def allreduce_cost(ctx: CheckContext) -> None:
    values = _values(ctx, "ring_allreduce_bytes", "allreduce_seconds")
    volume, seconds = values["ring_allreduce_bytes"], values["allreduce_seconds"]
    for (message, world), got in volume.items():
        want = expected("ring_allreduce_bytes", message, world)
        if _close(got, want):
            continue
        if world > 2 and _close(got, (world - 1) * message):
            raise ctx.fail(f"naive all-to-all volume: ring_allreduce_bytes({message:g}, {world}) = {got:.6g} = "
                           f"(W-1) x M; the ring sends 2(W-1)/W x M = {want:.6g}, almost 2M for any W", hint=5)
        if _close(got, 2 * message):
            raise ctx.fail(f"ring_allreduce_bytes({message:g}, {world}) = {got:.6g} = 2M: the (W-1)/W factor is "
                           f"missing (2(W-1)/W x M = {want:.6g}; with one rank nothing is sent)", hint=5)
        raise ctx.fail(f"ring_allreduce_bytes({message:g}, {world}) = {got:.6g}, expected 2(W-1)/W x M = {want:.6g}",
                       hint=5)
    for (message, world, bandwidth), got in seconds.items():
        want = expected("allreduce_seconds", message, world, bandwidth)
        if _close(got, want * 8):
            raise ctx.fail(f"allreduce_seconds({message:g}, {world}, {bandwidth:g}) = {got:.6g}: 8 times too slow; "
                           "the bandwidth is in bytes per second, not bits", hint=5)
        if not _close(got, want):
            raise ctx.fail(f"allreduce_seconds({message:g}, {world}, {bandwidth:g}) = {got:.6g}, expected the volume "
                           f"over the bandwidth, {want:.6g} s", hint=5)


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
            raise ctx.fail(f"{call} = {got / 1e9:.4g} GB: optimizer_bytes is ignored (K = 12 hard-coded)", hint=6)
        for other in (0, 1, 2, 3):
            if other != stage and _close(got, expected("zero_memory_per_gpu", params, world, other, k)):
                raise ctx.fail(f"{call} = {got / 1e9:.4g} GB, which is stage {other}'s memory; stage {stage} should "
                               f"give {want / 1e9:.4g} GB (stage 1 shards the optimizer state, 2 also the "
                               "gradients, 3 also the weights)", hint=6)
        raise ctx.fail(f"{call} = {got / 1e9:.4g} GB, expected {want / 1e9:.4g} GB", hint=6)
    for stage, outcome in bad.items():
        if not (isinstance(outcome, dict) and outcome["raised"].startswith("ValueError")):
            shown = outcome["raised"] if isinstance(outcome, dict) else f"returned {outcome}"
            raise ctx.fail(f"zero_memory_per_gpu(1e9, 8, stage={stage}): {shown}; an unknown stage should raise "
                           "ValueError", hint=6)
