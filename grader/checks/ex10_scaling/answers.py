"""Exercise 10's closed forms: the answers themselves. A secret (grader/checks/__init__.py): never
in a sandbox, never in a student copy, nor any value of theirs: a copy's public checks judge the laws the
formulas obey (properties.py)."""

from __future__ import annotations

from collections.abc import Callable

from grader.judge.slips import Formula


def warmup_lr(base_lr: float, base_batch: int, batch: int, step: int, warmup: int) -> float:
    target = base_lr * batch / base_batch
    return target if step >= warmup else base_lr + (target - base_lr) * step / warmup


def zero_memory(params: float, world: int, stage: int, optimizer_bytes: int) -> float:
    shards = [2.0, 2.0, float(optimizer_bytes)]  # weights, gradients, optimizer state
    divided = {0: (), 1: (2,), 2: (1, 2), 3: (0, 1, 2)}[stage]
    return params * sum(b / world if i in divided else b for i, b in enumerate(shards))


# Kept as expressions where one line says it, so that the slip search (grader/judge/slips.py) can
# rewrite the formula itself (a `/` read as `//`), not only its inputs and result.
CLOSED_FORMS: dict[str, Callable[..., float]] = {
    "scaled_lr": warmup_lr,
    "effective_batch": Formula(("b", "w", "a"), "b * w * a"),
    "amdahl_speedup": Formula(("p", "n"), "1 / ((1 - p) + p / n)"),
    "parallel_efficiency": Formula(("p", "n"), "1 / ((1 - p) + p / n) / n"),
    "ring_allreduce_bytes": Formula(("m", "w"), "2 * (w - 1) / w * m"),
    "allreduce_seconds": Formula(("m", "w", "bandwidth"), "2 * (w - 1) / w * m / bandwidth"),
    "zero_memory_per_gpu": zero_memory,
}
