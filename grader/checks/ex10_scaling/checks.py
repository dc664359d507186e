"""Judging exercise 10: each formula against its closed form on a grid of inputs that includes
the limits (one worker, serial or fully parallel work, one rank, a huge W) and published figures
(the ZeRO paper's 7.5B parameters on 64 GPUs).

Each check evaluates only its own functions (one small job each) and says what it measured; it
names a slip (a unit, a percentage, floor division, W off by one, ... or the function's own usual
mistakes in NAMED_SLIPS) only when that slip gives the value at every probed input, never from one
input (grader/judge/slips.py, docs/maintainers/DIAGNOSES.md). The right values come from `expected`: the closed forms
(answers.py, a secret) in the course. A student copy has neither them nor any value of theirs: there each check
judges the laws the formulas obey instead (properties.py); the check at random inputs, which only the closed
forms can judge, is hidden (hidden.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path

from grader.checks.ex10_scaling import properties
from grader.checks.ex10_scaling.facts import EVALUATE, Evaluated, Value
from grader.checks.ex10_scaling.probes import BAD_ZERO_STAGES, PARAMS, PROBES, random_probes
from grader.judge.api import CheckContext, CheckFailed, check
from grader.judge.names import Cause, HintName
from grader.judge.slips import Function, Slip, find_slip, on_argument, scaled
from grader.judge.tolerance import close_either_way

REL, ABS = properties.REL, properties.ABS
# the closed forms are a secret: in the course, not in a student copy (asked of the file: an editable install of
# the course would lend its answers to a copy run beside it)
CLOSED = Path(__file__).with_name("answers.py").is_file()


def expected(name: str, *args: float) -> float:
    """The right value of `name` at `args`, from the closed forms (the course's; see CLOSED)."""
    from grader.checks.ex10_scaling.answers import CLOSED_FORMS

    return CLOSED_FORMS[name](*args)


def _evaluated(ctx: CheckContext, names: tuple[str, ...], seed: int | None = None) -> Evaluated:
    """The student's values of `names` on the grader's probes (the fixed grid, or seed's random ones)."""
    [facts] = ctx.facts(EVALUATE, nprocs=1, names=list(names), seed=seed)
    return facts


def _unjudgeable(ctx: CheckContext, what: str, values: list[Value] | None, inputs: int) -> CheckFailed:
    """A report with another number of values than inputs probed: judging fewer would pass untested inputs."""
    count = "no values" if values is None else f"{len(values)} values"
    return ctx.fail(f"rank 0 reported facts the grader cannot judge: {count} of {what} for its {inputs} inputs")


def _tables(
    ctx: CheckContext, facts: Evaluated, names: tuple[str, ...], seed: int | None = None
) -> dict[str, dict[tuple, float]]:
    """Per function, {arguments: value}; fails at the first value that is not a finite number."""
    probes = PROBES if seed is None else random_probes(seed)
    tables: dict[str, dict[tuple, float]] = {}
    for name in names:
        reported = facts["values"].get(name)
        if reported is None or len(reported) != len(probes[name]):
            raise _unjudgeable(ctx, name, reported, len(probes[name]))
        tables[name] = {}
        for args, value in zip(probes[name], reported):
            if not isinstance(value, float) or not math.isfinite(value):
                shown = value["raised"] if isinstance(value, dict) else f"returned {value}"
                raise ctx.fail(f"{name}{args}: {shown}; a finite number was expected")
            tables[name][args] = value
    return tables


def _values(ctx: CheckContext, *names: str, seed: int | None = None) -> dict[str, dict[tuple, float]]:
    """Per function, {arguments: value} on the grader's probes (the fixed grid, or seed's random ones)."""
    return _tables(ctx, _evaluated(ctx, names, seed), names, seed)


def reference(name: str) -> Function:
    """The trusted `name`: its closed form (the course's; see CLOSED)."""
    from grader.checks.ex10_scaling.answers import CLOSED_FORMS

    return CLOSED_FORMS[name]


def _call(name: str, args: tuple) -> str:
    return f"{name}({', '.join(f'{PARAMS[name][i]}={v:g}' for i, v in enumerate(args))})"


def judge_values(
    ctx: CheckContext,
    name: str,
    table: dict[tuple, float],
    hint: HintName | None,
    formula: str = "",
    again: str = "",
    named: list[Slip] | None = None,
    only_if_slip: bool = False,
    everywhere: dict[tuple, float] | None = None,
) -> None:
    """Fail where `name` leaves its closed form: the measured values, and a slip named only when it
    reproduces the value at every probed input (grader/judge/slips.py), never from one input.
    `only_if_slip`: return instead of failing when no slip is proven (the caller says more);
    `everywhere`: all the values a slip must give (by default `table`'s)."""
    wrong = [(args, got, expected(name, *args)) for args, got in table.items()]
    wrong = [(args, got, want) for args, got, want in wrong if not close_either_way(got, want, rtol=REL, atol=ABS)]
    if not wrong:
        return
    shown = "; ".join(f"{_call(name, args)} = {got:.6g}, expected {want:.6g}" for args, got, want in wrong[:3])
    more = f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""
    measured = f"{shown}{more}{formula}: wrong at {len(wrong)} of the {len(table)} inputs probed{again}"
    own = NAMED_SLIPS.get(name, []) if named is None else named
    probed = table if everywhere is None else everywhere
    slip = find_slip(reference(name), list(probed), list(probed.values()), own, PARAMS[name])
    if slip is None and only_if_slip:
        return
    if slip is None:
        raise ctx.fail(measured, hint=hint)
    raise ctx.fail(
        f"{measured}. {slip.sentence[0].upper()}{slip.sentence[1:]} "
        f"(this slip gives the value at all {len(probed)} inputs probed)",
        hint=hint,
        proven=slip.proven,
    )


def _lr_sqrt(f: Function) -> Function:
    return lambda base_lr, base_batch, batch, step, warmup: f(
        base_lr, base_batch, base_batch * math.sqrt(batch / base_batch), step, warmup
    )


def _lr_from_zero(f: Function) -> Function:
    def rate(base_lr: float, base_batch: int, batch: int, step: int, warmup: int) -> float:
        target = f(base_lr, base_batch, batch, max(step, warmup), warmup)
        return target if step >= warmup else target * step / warmup

    return rate


def _lr_flat(f: Function) -> Function:
    """The warmup held at its start: every step before warmup_steps given step 0's rate (base_lr), then the
    target."""
    return lambda base_lr, base_batch, batch, step, warmup: f(
        base_lr, base_batch, batch, step if step >= warmup else 0, warmup
    )


def _volume_slips(seconds: bool) -> list[Slip]:
    """The wrong ring volumes, each as a slip of ring_allreduce_bytes (`seconds` False) or of the time
    it takes (True), whose reference volume is the time times the bandwidth."""
    wrong: list[tuple[Cause, Cause, str, Volume, str]] = [
        (
            Cause("naive_all_to_all"),
            Cause("time_of_naive_all_to_all"),
            "(W-1) x M: whole messages to every other rank, a naive all-to-all",
            lambda ring, m, w: (w - 1) * m,
            "",
        ),
        (
            Cause("ring_factor_missing"),
            Cause("time_of_ring_factor_missing"),
            "2M: the (W-1)/W factor is missing (with one rank nothing is sent)",
            lambda ring, m, w: 2 * m,
            "",
        ),
        (
            Cause("whole_message_per_step"),
            Cause("time_of_whole_message_per_step"),
            "2(W-1) x M: the whole message at every step instead of a 1/W chunk",
            lambda ring, m, w: 2 * (w - 1) * m,
            "",
        ),
        (
            Cause("one_phase_only"),
            Cause("time_of_one_phase_only"),
            "(W-1)/W x M: one phase only (the reduce-scatter or the all-gather; the ring does both)",
            lambda ring, m, w: ring / 2,
            "factor_2_missing",
        ),
        (
            Cause("sent_and_received_counted"),
            Cause("time_of_sent_and_received_counted"),
            "4(W-1)/W x M: the bytes each rank receives counted with those it sends; count what one rank sends",
            lambda ring, m, w: 2 * ring,
            "factor_2_doubled",
        ),
    ]
    slips = []
    for name, time_name, sentence, volume, key in wrong:
        if seconds:
            slips.append(Slip(time_name, f"it is the time of sending {sentence}", _time_of(volume), key or time_name))
        else:
            slips.append(Slip(name, f"it is {sentence}", _volume_of(volume), key or name))
    if not seconds:
        bits = "it is 8 x 2(W-1)/W x M: bits, not bytes"
        slips.append(Slip(Cause("volume_in_bits"), bits, _volume_of(lambda ring, m, w: 8 * ring), "volume_in_bits"))
    return slips


Volume = Callable[[float, float, float], float]  # (the ring's volume, M, W) -> a wrong volume


def _volume_of(volume: Volume) -> Callable[[Function], Function]:
    return lambda f: lambda m, w: volume(f(m, w), m, w)


def _time_of(volume: Volume) -> Callable[[Function], Function]:
    return lambda f: lambda m, w, bw: volume(f(m, w, bw) * bw, m, w) / bw


def _at_stage(other: int) -> Callable[[Function], Function]:
    return lambda f: lambda params, w, s, k: f(params, w, other, k)


def _zero_units() -> list[Slip]:
    return [
        Slip(cause, f"that is {unit}, the function returns bytes", scaled(1 / size), key)
        for cause, unit, size, key in (
            (Cause("zero_memory_in_GB"), "GB", 1e9, "unit_G_divided"),
            (Cause("zero_memory_in_GiB"), "GiB", 2.0**30, "unit_Gi_divided"),
        )
    ]


# Each function's own slips, beside the generic ones (which they replace where the key is the same).
NAMED_SLIPS: dict[str, list[Slip]] = {
    "scaled_lr": [
        Slip(
            Cause("sqrt_lr_scaling"),
            "square-root scaling: 4x the batch gives 2x the learning rate; the linear rule "
            "multiplies the rate by the batch ratio",
            _lr_sqrt,
        ),
        Slip(  # a warmup held flat at the target is this same function: one name for it
            Cause("no_warmup"),
            "no warmup: the rate is the target from step 0 (a warmup held at the target is none); it should "
            "climb from base_lr to the target over the first warmup_steps steps",
            lambda f: lambda b0, bb, b, s, w: f(b0, bb, b, s, 0),
        ),
        Slip(
            Cause("warmup_flat"),
            "a flat warmup: the rate stays at base_lr until warmup_steps, then jumps to the target (step // "
            "warmup_steps, an integer division, does this too); it should climb linearly, base_lr + (target - "
            "base_lr) * step / warmup_steps",
            _lr_flat,
        ),
        Slip(
            Cause("warmup_from_zero"),
            "warmup from zero: the rate is 0 at step 0; the warmup starts at base_lr",
            _lr_from_zero,
        ),
        Slip(
            Cause("warmup_off_by_one_step"),
            "off by one step: the rate at step s is the rate of step s + 1 (steps count "
            "from 0, where the rate is base_lr)",
            on_argument(3, lambda s: s + 1),
            "arg3:+1",
        ),
        Slip(
            Cause("warmup_one_step_early"),
            "the warmup reaches the target one step early (divided by warmup_steps - 1)",
            on_argument(4, lambda w: w - 1),
            "arg4:-1",
        ),
        Slip(
            Cause("warmup_one_step_late"),
            "the warmup reaches the target one step late (divided by warmup_steps + 1)",
            on_argument(4, lambda w: w + 1),
            "arg4:+1",
        ),
    ],
    "effective_batch": [
        Slip(
            Cause("accumulation_ignored"),
            "gradient accumulation ignored: each optimizer step sees accumulation_steps micro-batches per GPU",
            lambda f: lambda b, w, a: f(b, w, 1),
        ),
        Slip(
            Cause("world_size_ignored"),
            "world size ignored: every one of the world_size GPUs contributes its batch to the step",
            lambda f: lambda b, w, a: f(b, 1, a),
        ),
    ],
    "amdahl_speedup": [
        Slip(
            Cause("amdahl_fractions_swapped"),
            "the serial and parallel fractions are swapped: with 90% parallel work "
            "8 workers give 1/(0.1 + 0.9/8) = 4.706",
            lambda f: lambda p, n: f(1 - p, n),
        ),
        Slip(
            Cause("parallel_part_not_divided"),
            "amdahl_speedup is 1 for every n: the parallel fraction p is never divided by n (1/((1-p) + p/n))",
            lambda f: lambda p, n: f(p, 1),
        ),
        Slip(
            Cause("gustafson_not_amdahl"),
            "Gustafson's scaled speedup, (1-p) + p x n, instead of Amdahl's: Amdahl "
            "fixes the problem size, 1/((1-p) + p/n)",
            lambda f: lambda p, n: (1 - p) + p * n,
        ),
    ],
    "parallel_efficiency": [
        Slip(
            Cause("efficiency_times_n"),
            "it is speedup x n; the efficiency is speedup / n",
            lambda f: lambda p, n: f(p, n) * n * n,
        ),
        Slip(
            Cause("efficiency_inverted"),
            "it is n / speedup; the efficiency is speedup / n",
            lambda f: lambda p, n: 1 / f(p, n),
        ),
        Slip(
            Cause("efficiency_is_speedup"),
            "it is the speedup itself, not divided by n",
            lambda f: lambda p, n: f(p, n) * n,
        ),
    ],
    "ring_allreduce_bytes": _volume_slips(seconds=False),
    "allreduce_seconds": [
        Slip(
            Cause("bandwidth_in_bits"), "8 times too slow: the bandwidth is in bytes per second, not bits", scaled(8.0)
        ),
        Slip(
            Cause("bandwidth_turned_into_bits"),
            "8 times too fast: the bandwidth is already in bytes per second (do not convert it to bits)",
            scaled(1 / 8),
        ),
        *_volume_slips(seconds=True),
    ],
    "zero_memory_per_gpu": [
        Slip(
            Cause("optimizer_bytes_ignored"),
            "optimizer_bytes is ignored (K = 12 hard-coded)",
            lambda f: lambda params, w, s, k: f(params, w, s, 12),
        ),
        *_zero_units(),
    ],
}


@check("lr_schedule")
def lr_schedule(ctx: CheckContext) -> None:
    values = _values(ctx, "scaled_lr")
    if not CLOSED:
        return properties.judge(ctx, values)
    lr = values["scaled_lr"]
    wrong = [
        args for args, got in lr.items() if not close_either_way(got, expected("scaled_lr", *args), rtol=REL, atol=ABS)
    ]
    after_warmup = any(step >= warmup for _, _, _, step, warmup in wrong)  # the target itself is wrong
    judge_values(
        ctx,
        "scaled_lr",
        lr,
        HintName("linear_scaling") if after_warmup else HintName("warmup"),
        " (linear from base_lr at step 0 to base_lr x batch/base_batch at "
        "step warmup_steps, the target from then on; with warmup_steps=0 the target from step 0)",
    )


@check("effective_batch")
def effective_batch(ctx: CheckContext) -> None:
    values = _values(ctx, "effective_batch")
    if not CLOSED:
        return properties.judge(ctx, values)
    judge_values(
        ctx,
        "effective_batch",
        values["effective_batch"],
        HintName("global_batch"),
        " (per_gpu_batch x world_size x accumulation_steps)",
    )


@check("amdahl")
def amdahl(ctx: CheckContext) -> None:
    values = _values(ctx, "amdahl_speedup", "parallel_efficiency")
    if not CLOSED:
        return properties.judge(ctx, values)
    judge_values(ctx, "amdahl_speedup", values["amdahl_speedup"], HintName("amdahl"), " (1/((1-p) + p/n))")
    judge_values(ctx, "parallel_efficiency", values["parallel_efficiency"], HintName("amdahl"), " (speedup / n)")


@check("allreduce_cost")
def allreduce_cost(ctx: CheckContext) -> None:
    values = _values(ctx, "ring_allreduce_bytes", "allreduce_seconds")
    if not CLOSED:
        return properties.judge(ctx, values)
    judge_values(
        ctx,
        "ring_allreduce_bytes",
        values["ring_allreduce_bytes"],
        HintName("ring_traffic"),
        " (the ring sends 2(W-1)/W x M, almost 2M for any W)",
    )
    judge_values(
        ctx,
        "allreduce_seconds",
        values["allreduce_seconds"],
        HintName("ring_traffic"),
        " (the ring's volume over the bandwidth, in bytes per second)",
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
            close_either_way(
                got, params * sum(b / world if d else b for b, d in zip(sizes, divided)), rtol=REL, atol=ABS
            )
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


# (the stage computed, the stage asked for): the cause of each mix-up, spelled out for grader lint-course
_STAGE_MIX_UPS = {
    (1, 0): Cause("zero_stage_1_for_0"),
    (2, 0): Cause("zero_stage_2_for_0"),
    (3, 0): Cause("zero_stage_3_for_0"),
    (0, 1): Cause("zero_stage_0_for_1"),
    (2, 1): Cause("zero_stage_2_for_1"),
    (3, 1): Cause("zero_stage_3_for_1"),
    (0, 2): Cause("zero_stage_0_for_2"),
    (1, 2): Cause("zero_stage_1_for_2"),
    (3, 2): Cause("zero_stage_3_for_2"),
    (0, 3): Cause("zero_stage_0_for_3"),
    (1, 3): Cause("zero_stage_1_for_3"),
    (2, 3): Cause("zero_stage_2_for_3"),
}


def _stage_slips(stage: int) -> list[Slip]:
    """Another stage's memory for `stage`: the stages mixed up."""
    return [
        Slip(
            _STAGE_MIX_UPS[(other, stage)],
            f"it gives stage {other}'s memory; stage {stage} should shard {_sharded(_right_division(stage))} "
            "(stage 1 shards the optimizer state, 2 also the gradients, 3 also the weights)",
            _at_stage(other),
            {stage - 1: "arg2:-1", stage + 1: "arg2:+1"}.get(other, f"stage:{other}"),  # the generic shifts
        )
        for other in ZERO_STAGES
        if other != stage
    ]


def _sharded(divided: tuple[bool, ...]) -> str:
    return ", ".join(part for part, d in zip(ZERO_PARTS, divided) if d) or "nothing"


@check("zero_memory")
def zero_memory(ctx: CheckContext) -> None:
    facts = _evaluated(ctx, ("zero_memory_per_gpu",))
    table = _tables(ctx, facts, ("zero_memory_per_gpu",))["zero_memory_per_gpu"]
    bad = facts.get("bad_stage")
    if bad is None or len(bad) != len(BAD_ZERO_STAGES):
        raise _unjudgeable(ctx, "zero_memory_per_gpu at an unknown stage", bad, len(BAD_ZERO_STAGES))
    if not CLOSED:
        outcomes = {(stage,): outcome for stage, outcome in zip(BAD_ZERO_STAGES, bad)}
        return properties.judge(ctx, {"zero_memory_per_gpu": table, "bad_stage": outcomes})
    name, hint = "zero_memory_per_gpu", HintName("zero_memory")
    judge_values(ctx, name, table, hint, only_if_slip=True)  # a slip of the whole function, every stage alike
    for stage in ZERO_STAGES:
        rows = {args: got for args, got in table.items() if args[2] == stage}
        judge_values(ctx, name, rows, hint, again=f" at stage {stage}", named=_stage_slips(stage), only_if_slip=True)
        wrong = [
            args for args, got in rows.items() if not close_either_way(got, expected(name, *args), rtol=REL, atol=ABS)
        ]
        if wrong:
            params, world, _, k = wrong[0]
            call = f"zero_memory_per_gpu({params:g}, {world}, stage={stage}, optimizer_bytes={k})"
            raise ctx.fail(
                f"{call} = {rows[wrong[0]] / 1e9:.4g} GB{_zero_mistake(table, stage, k)}, expected "
                f"{expected(name, *wrong[0]) / 1e9:.4g} GB",
                hint=hint,
            )
    for stage, outcome in zip(BAD_ZERO_STAGES, bad):
        if not (isinstance(outcome, dict) and outcome["raised"].startswith("ValueError")):
            shown = outcome["raised"] if isinstance(outcome, dict) else f"returned {outcome}"
            raise ctx.fail(
                f"zero_memory_per_gpu(1e9, 8, stage={stage}): {shown}; an unknown stage should raise ValueError",
                hint=HintName("zero_memory"),
            )
