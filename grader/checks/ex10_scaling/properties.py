"""Exercise 10's public checks in a student copy: the laws each formula obeys, judged on the student's own values.

The closed forms are a secret (answers.py) and no table of their values ships, so a copy cannot compare a value
with the right one. It checks what the exercise's docstring states instead: the limits (one rank, one worker,
serial or fully parallel work), and the identity each law is (the time 1/speedup is (1-p) + p/n, a ring sends
2(W-1) chunks of M/W, ...), each checked on the student's value itself. Together they hold at every probe only
for the right formula; a failure shows the student's value and the law it breaks, never an expected number.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grader.checks.ex10_scaling.probes import PARAMS
from grader.judge.api import CheckContext
from grader.judge.names import HintName
from grader.judge.tolerance import close_either_way

REL, ABS = 1e-6, 1e-12  # math.isclose's rule (grader.judge.tolerance.close_either_way)
_same = functools.partial(close_either_way, rtol=REL, atol=ABS)


@dataclass(frozen=True)
class Law:
    """What one function's value obeys at the inputs `where` picks: `holds(args, value)`."""

    says: str
    hint: HintName
    holds: Callable[..., bool]
    where: Callable[..., bool] = lambda *args: True


def _lr_target(base_lr: float, base_batch: float, batch: float, *_: float) -> float:
    return base_lr * batch / base_batch


def _warmup_share(got: float, base_lr: float, base_batch: float, batch: float, step: float, warmup: float) -> bool:
    """(rate - base_lr) / (target - base_lr) is step / warmup_steps: the warmup climbs in equal steps."""
    climb = _lr_target(base_lr, base_batch, batch) - base_lr
    return _same(got, base_lr) if climb == 0 else _same((got - base_lr) / climb, step / warmup)


def _amdahl_time(p: float, n: float) -> float:
    """The time left on n workers, the serial work's share of it not divided."""
    return (1 - p) + p / n


def _zero_bytes(optimizer_bytes: float, world: float, stage: float) -> float:
    """Bytes per parameter: weights, gradients, optimizer state, each divided by W from its stage on."""
    return sum(size / world if stage >= first else size for size, first in ((2, 3), (2, 2), (optimizer_bytes, 1)))


LAWS: dict[str, list[Law]] = {
    "scaled_lr": [
        Law(
            "after the warmup (step >= warmup_steps) the rate is the target, base_lr x batch / base_batch",
            HintName("linear_scaling"),
            lambda got, b0, bb, b, s, w: _same(got, _lr_target(b0, bb, b)),
            lambda b0, bb, b, s, w: s >= w,
        ),
        Law(
            "the warmup starts at base_lr at step 0",
            HintName("warmup"),
            lambda got, b0, bb, b, s, w: _same(got, b0),
            lambda b0, bb, b, s, w: s == 0 < w,
        ),
        Law(
            "during the warmup the rate climbs in equal steps: at step s it is s / warmup_steps of the way "
            "from base_lr to the target",
            HintName("warmup"),
            _warmup_share,
            lambda b0, bb, b, s, w: 0 < s < w,
        ),
    ],
    "effective_batch": [
        Law(
            "divided by world_size x accumulation_steps it is per_gpu_batch: every GPU adds its batch at every "
            "accumulation step",
            HintName("global_batch"),
            lambda got, b, w, a: _same(got / (w * a), b),
        ),
    ],
    "amdahl_speedup": [
        Law(
            "one worker gives no speedup (1)",
            HintName("amdahl"),
            lambda got, p, n: _same(got, 1),
            lambda p, n: n == 1,
        ),
        Law(
            "with no parallel work (p = 0) there is no speedup (1)",
            HintName("amdahl"),
            lambda got, p, n: _same(got, 1),
            lambda p, n: p == 0,
        ),
        Law(
            "with all the work parallel (p = 1) n workers are n times faster",
            HintName("amdahl"),
            lambda got, p, n: _same(got, n),
            lambda p, n: p == 1,
        ),
        Law(
            "the time left, 1 / speedup, is the serial part 1 - p plus the parallel part p / n",
            HintName("amdahl"),
            lambda got, p, n: got != 0 and _same(1 / got, _amdahl_time(p, n)),
        ),
    ],
    "parallel_efficiency": [
        Law(
            "one worker is perfectly efficient (1)",
            HintName("amdahl"),
            lambda got, p, n: _same(got, 1),
            lambda p, n: n == 1,
        ),
        Law(
            "with all the work parallel (p = 1) the efficiency is 1",
            HintName("amdahl"),
            lambda got, p, n: _same(got, 1),
            lambda p, n: p == 1,
        ),
        Law(
            "efficiency x n is Amdahl's speedup, whose inverse is (1 - p) + p / n",
            HintName("amdahl"),
            lambda got, p, n: got != 0 and _same(1 / (got * n), _amdahl_time(p, n)),
        ),
    ],
    "ring_allreduce_bytes": [
        Law(
            "one rank sends nothing (0 bytes)",
            HintName("ring_traffic"),
            lambda got, m, w: _same(got, 0),
            lambda m, w: w == 1,
        ),
        Law(
            "each rank sends 2(W-1) chunks of M/W bytes: W-1 in the reduce-scatter, W-1 in the all-gather",
            HintName("ring_traffic"),
            lambda got, m, w: _same(got / (m / w), 2 * (w - 1)),
        ),
    ],
    "allreduce_seconds": [
        Law(
            "seconds x bandwidth is the ring's volume, 2(W-1) chunks of M/W bytes (the bandwidth is in bytes "
            "per second)",
            HintName("ring_traffic"),
            lambda got, m, w, bw: _same(got * bw / (m / w), 2 * (w - 1)),
        ),
    ],
    "zero_memory_per_gpu": [
        Law(
            "on one GPU every stage keeps all of it, (2 + 2 + optimizer_bytes) bytes per parameter",
            HintName("zero_memory"),
            lambda got, params, w, s, k: _same(got / params, 4 + k),
            lambda params, w, s, k: w == 1,
        ),
        Law(
            "per parameter, 2 bytes of weights, 2 of gradients and optimizer_bytes of optimizer state, stage 1 "
            "dividing the optimizer state by W, stage 2 also the gradients, stage 3 also the weights",
            HintName("zero_memory"),
            lambda got, params, w, s, k: _same(got / params, _zero_bytes(k, w, s)),
        ),
    ],
}


def _call(name: str, args: tuple) -> str:
    return f"{name}({', '.join(f'{param}={value:g}' for param, value in zip(PARAMS[name], args))})"


def judge(ctx: CheckContext, values: dict[str, dict[tuple, Any]]) -> None:
    """Fail at the first law a function breaks (its functions in the order given), showing its own values."""
    for name, table in values.items():
        if name == "bad_stage":
            continue
        for law in LAWS[name]:
            broken = [(args, got) for args, got in table.items() if law.where(*args) and not law.holds(got, *args)]
            if broken:
                shown = "; ".join(f"{_call(name, args)} = {got:.6g}" for args, got in broken[:3])
                more = f" (and {len(broken) - 3} more)" if len(broken) > 3 else ""
                raise ctx.fail(f"{shown}{more}: but {law.says}", hint=law.hint)
    for (stage,), outcome in values.get("bad_stage", {}).items():
        if not (isinstance(outcome, dict) and outcome["raised"].startswith("ValueError")):
            shown = outcome["raised"] if isinstance(outcome, dict) else f"returned {outcome}"
            raise ctx.fail(
                f"zero_memory_per_gpu(1e9, 8, stage={stage}): {shown}; an unknown stage should raise ValueError",
                hint=HintName("zero_memory"),
            )
