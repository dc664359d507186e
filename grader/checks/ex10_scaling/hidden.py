"""Exercise 10's hidden check: the formulas at random inputs drawn for every grading, judged against
the closed forms (answers.py) and by their properties. A table of the public probes' answers passes
every public check and fails this one; students never run or see it."""

from __future__ import annotations

from grader.checks.ex10_scaling.answers import CLOSED_FORMS
from grader.checks.ex10_scaling.checks import REL, _values, judge_values
from grader.judge.api import CheckContext, check
from grader.judge.names import HintName


def _non_decreasing(values: list[float]) -> bool:
    return all(b >= a * (1 - REL) for a, b in zip(values, values[1:]))


@check("holds_off_grid")
def holds_off_grid(ctx: CheckContext) -> None:
    values = _values(ctx, *CLOSED_FORMS, seed=ctx.seed)
    again = f" (random inputs, seed {ctx.seed})"
    speedup = values["amdahl_speedup"]
    if not _non_decreasing(list(speedup.values())):
        raise ctx.fail(
            f"amdahl_speedup is not monotone in n: {list(speedup.items())[:4]}{again}", hint=HintName("amdahl")
        )
    for (p, n), got in speedup.items():
        if got > min(n, 1 / (1 - p)) * (1 + REL):
            raise ctx.fail(
                f"amdahl_speedup({p}, {n}) = {got:.6g} beats its limits, n and 1/(1-p){again}", hint=HintName("amdahl")
            )
    if not _non_decreasing(list(values["ring_allreduce_bytes"].values())):
        raise ctx.fail(f"ring_allreduce_bytes does not grow with W{again}", hint=HintName("ring_traffic"))
    grid = _values(ctx, *CLOSED_FORMS)
    for name in CLOSED_FORMS:
        # A slip is named only if it also gives the values on the fixed grid: a function right there
        # and wrong off it (a table of the grid's answers) is no slip, whatever it returns off the grid.
        judge_values(ctx, name, values[name], None, again=again, everywhere={**grid[name], **values[name]})
