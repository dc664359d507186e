"""Rank side of exercise 10: evaluate the student's formulas on the grader's grid of inputs.

Only values (or the exception a call raised) are recorded; every property is judged in checks.py.
Any real number counts as a value (a numpy scalar from a numpy formula as much as a float).
"""

from __future__ import annotations

import numbers
from typing import Any

from grader.checks.ex10_scaling.facts import Value
from grader.checks.ex10_scaling.probes import BAD_ZERO_STAGES, PROBES, random_probes
from grader.engine.rank_runtime import RankContext


def _call(function: Any, args: tuple) -> Value:
    try:
        value = function(*args)
    except NotImplementedError:
        raise
    except Exception as exc:
        return {"raised": f"{type(exc).__name__}: {exc}"}
    return _recorded(value)


def _recorded(value: Any) -> float | str:
    """A real number as a float, anything else as its (short) repr: never an error of the grader's own, even
    for an int too large for a float or an object whose repr raises."""
    try:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
        return repr(value)[:200]
    except Exception as exc:  # OverflowError from float(10**400), anything from a student's __repr__
        return f"<a {type(value).__name__} that cannot be shown: {type(exc).__name__}>"


def evaluate(ctx: RankContext, names: list[str], seed: int | None = None) -> dict[str, Any]:
    """Each named function's value on its probes, in order: the fixed grid, or the random probes of
    `seed` (one check's functions only, so a function not written yet fails only the checks that
    need it)."""
    probes = PROBES if seed is None else random_probes(seed)
    values: dict[str, list[Value]] = {}
    ctx.facts["values"] = values
    for name in names:
        function = ctx.student(name)
        values[name] = [_call(function, args) for args in probes[name]]
    if "zero_memory_per_gpu" in names:
        zero = ctx.student("zero_memory_per_gpu")
        ctx.facts["bad_stage"] = [_call(zero, (1e9, 8, stage)) for stage in BAD_ZERO_STAGES]
    return {}
