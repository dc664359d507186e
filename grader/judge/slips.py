"""Slips in closed forms: name a wrong formula only when a known slip reproduces it everywhere.

A slip is a transformation of the trusted reference (of its inputs, its output, or the division
signs of its expression) with a name and a sentence giving its cause and fix. `find_slip` applies
every slip of a small generic space (plus the exercise's own named ones) to the reference and
names the one that gives the student's value at *every* probed input; one input proves nothing
(a wrong formula can agree with a slip at W=2 and nowhere else). Several slips that fit and
disagree on the name mean the cause is not known: nothing is named.
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from grader.judge.names import Cause
from grader.judge.proof import Proven, replayed
from grader.judge.tolerance import close_either_way

REL = 1e-6
Function = Callable[..., float]

# Result scales of a unit slip: (factor, the prefix it stands for).
UNITS: tuple[tuple[float, str], ...] = (
    (1e3, "k"),
    (1e6, "M"),
    (1e9, "G"),
    (2.0**10, "Ki"),
    (2.0**20, "Mi"),
    (2.0**30, "Gi"),
)
# Names the expression of a `Formula` may use besides its parameters.
_ALLOWED = {"min": min, "max": max, "sqrt": math.sqrt}


@dataclass(frozen=True)
class Formula:
    """A closed form kept as an expression, so that slips can rewrite the formula itself (a `/`
    turned into `//`), not only its inputs and output."""

    params: tuple[str, ...]
    expression: str

    @functools.cached_property
    def _code(self) -> Any:
        return compile(ast.parse(self.expression, mode="eval"), "<formula>", "eval")

    def __call__(self, *args: float) -> float:
        return eval(self._code, {"__builtins__": {}, **_ALLOWED}, dict(zip(self.params, args)))  # noqa: S307

    def rewritten(self, tree: ast.Expression) -> Formula:
        return Formula(self.params, ast.unparse(tree))


@dataclass(frozen=True)
class ProvenSlip:
    """A slip that reproduced the function at every probe: its sentence, and its cause as proven by that replay."""

    sentence: str
    proven: Proven


@dataclass(frozen=True)
class Slip:
    """A hypothesis the judge can run: `make(reference)` is the reference with the slip in it.

    `key` says which transformation it is (the name, for the generic scales): an exercise's own slip
    with the key of a generic one replaces it (the same arithmetic under the name it has there)."""

    name: Cause
    sentence: str
    make: Callable[[Function], Function]
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.name)


def scaled(factor: float) -> Callable[[Function], Function]:
    """The reference's result times `factor`."""
    return lambda f: lambda *args: f(*args) * factor


def on_argument(position: int, change: Callable[[Any], Any]) -> Callable[[Function], Function]:
    """The reference with argument `position` changed before the call."""

    def make(f: Function) -> Function:
        def slipped(*args: Any) -> float:
            changed = list(args)
            changed[position] = change(changed[position])
            return f(*changed)

        return slipped

    return make


def swapped(i: int, j: int) -> Callable[[Function], Function]:
    def make(f: Function) -> Function:
        def slipped(*args: Any) -> float:
            changed = list(args)
            changed[i], changed[j] = changed[j], changed[i]
            return f(*changed)

        return slipped

    return make


def _replaced_by(function: Function) -> Callable[[Function], Function]:
    return lambda _reference: function


def _plus(shift: int) -> Callable[[Any], Any]:
    return lambda value: value + shift


def _parameter_names(reference: Function, arity: int) -> tuple[str, ...]:
    if isinstance(reference, Formula):
        return reference.params
    try:
        names = tuple(inspect.signature(reference).parameters)
    except (TypeError, ValueError):
        names = ()
    return names if len(names) == arity else tuple(f"argument {i + 1}" for i in range(arity))


def _floor_slips(reference: Function) -> list[Slip]:
    """One slip per `/` of the reference's expression turned into `//`, and all of them at once."""
    if not isinstance(reference, Formula):
        return []
    count = sum(
        isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
        for node in ast.walk(ast.parse(reference.expression, mode="eval"))
    )
    slips = []
    for which in [*range(count), None] if count > 1 else range(count):
        tree = ast.parse(reference.expression, mode="eval")
        divisions = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)]
        for index, node in enumerate(divisions):
            if which is None or index == which:
                node.op = ast.FloorDiv()
        shown = ast.unparse(tree) if which is None else ast.unparse(divisions[which])
        slipped = reference.rewritten(tree)
        slips.append(
            Slip(
                Cause("floor_division"),
                f"floor division: it computes `{shown}`, and `//` rounds the quotient down to an integer; "
                "use `/`, true division",
                _replaced_by(slipped),
                key=f"floor:{which}",
            )
        )
    return slips


def generic_slips(reference: Function, probes: Sequence[tuple], params: Sequence[str] | None = None) -> list[Slip]:
    """The generic slip space for `reference` on these probes: unit scales, percentages, a factor
    2, integer arguments off by one, arguments swapped, floor division."""
    arity = len(probes[0]) if probes else 0
    names = tuple(params) if params is not None else _parameter_names(reference, arity)
    slips = []
    for factor, prefix in UNITS:
        shown = f"2^{int(math.log2(factor))}" if factor >= 1024 and math.log2(factor).is_integer() else f"{factor:g}"
        slips.append(
            Slip(
                Cause(f"unit_{prefix}_divided"),
                f"a unit slip: every value is the expected one divided by {shown} (a conversion to {prefix}-units "
                "the function does not ask for); return the plain unit",
                scaled(1 / factor),
            )
        )
        slips.append(
            Slip(
                Cause(f"unit_{prefix}_multiplied"),
                f"a unit slip: every value is the expected one times {shown} (an input read as {prefix}-units, "
                "or a conversion the function does not ask for); take and return the plain unit",
                scaled(factor),
            )
        )
    slips += [
        Slip(
            Cause("result_as_percentage"),
            "a percentage: every value is 100 times the expected fraction; return the fraction",
            scaled(100.0),
        ),
        Slip(
            Cause("result_divided_by_100"),
            "every value is the expected one divided by 100, as if the result were a percentage; it is not",
            scaled(0.01),
        ),
        Slip(Cause("factor_2_missing"), "a factor 2 is missing: every value is half the expected one", scaled(0.5)),
        Slip(Cause("factor_2_doubled"), "a factor 2 too many: every value is twice the expected one", scaled(2.0)),
    ]
    for position, name in enumerate(names):
        column = [args[position] for args in probes]
        if all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in column) and any(0.0 < v < 1.0 for v in column):
            slips.append(
                Slip(
                    Cause(f"{name}_as_percentage"),
                    f"`{name}` is a fraction (0.9 means 90%), and the formula treats it as a percentage "
                    f"(divides it by 100); use it as it is",
                    on_argument(position, lambda v: v / 100),
                    key=f"arg{position}:/100",
                )
            )
            slips.append(
                Slip(
                    Cause(f"{name}_times_100"),
                    f"`{name}` is a fraction, and the formula multiplies it by 100 (a percentage); use it as it is",
                    on_argument(position, lambda v: v * 100),
                    key=f"arg{position}:*100",
                )
            )
        if all(isinstance(v, int) and not isinstance(v, bool) for v in column):
            for shift, sign, word in ((-1, "-", "minus"), (1, "+", "plus")):
                slips.append(
                    Slip(
                        Cause(f"{name}_{word}_1"),
                        f"off by one: the formula uses {name} {sign} 1 where it should use {name}",
                        on_argument(position, _plus(shift)),
                        key=f"arg{position}:{sign}1",
                    )
                )
    for i, first in enumerate(names):
        for j in range(i + 1, len(names)):
            second = names[j]
            slips.append(
                Slip(
                    Cause(f"{first}_{second}_swapped"),
                    f"arguments swapped: the formula uses `{first}` where `{second}` belongs and the other "
                    "way round; check the order of the parameters",
                    swapped(i, j),
                    key=f"swap:{i}:{j}",
                )
            )
    return slips + _floor_slips(reference)


def _reproduces(function: Function, probes: Sequence[tuple], got: Sequence[float], rel: float) -> bool:
    for args, value in zip(probes, got):
        try:
            predicted = float(function(*args))
        except Exception:  # a slip that cannot be evaluated here (a table without this input, a zero division)
            return False
        if not math.isfinite(predicted) or not close_either_way(predicted, value, rtol=rel, atol=1e-12):
            return False
    return True


def matching_slips(
    reference: Function,
    probes: Sequence[tuple],
    got: Sequence[float],
    named: Iterable[Slip] = (),
    params: Sequence[str] | None = None,
    rel: float = REL,
) -> list[Slip]:
    """Every slip (the exercise's `named` ones first, replacing generic ones of the same key) that
    gives `got` at every probe, and is not the reference itself on these probes."""
    probes, got = list(probes), [float(v) for v in got]
    if not probes or len(probes) != len(got) or _reproduces(reference, probes, got, rel):
        return []
    own = list(named)
    keys = {slip.key for slip in own}
    candidates = own + [s for s in generic_slips(reference, probes, params) if s.key not in keys]
    return [slip for slip in candidates if _reproduces(slip.make(reference), probes, got, rel)]


def find_slip(
    reference: Function,
    probes: Sequence[tuple],
    got: Sequence[float],
    named: Iterable[Slip] = (),
    params: Sequence[str] | None = None,
    rel: float = REL,
) -> ProvenSlip | None:
    """The slip that reproduces `got` at every probe, or None when none does or several with
    different names do (the cause is then not proven)."""
    found = matching_slips(reference, probes, got, named, params, rel)
    if not found or len({slip.name for slip in found}) != 1:
        return None
    return ProvenSlip(found[0].sentence, replayed(found[0].name))
