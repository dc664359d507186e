"""What a numeric question asks for: an exact whole number, N significant figures or N decimals.

The precision is stated on every sheet and in every export, and it sets the grading tolerance: an
answer is right when it is within one unit of the last asked digit, so every correct rounding (and
a last digit off by one from rounding intermediate results) is accepted, while an answer given to
fewer digits than asked is not. A bank may widen that with `tolerance`, never narrow it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

KINDS = ("exact", "sig", "decimals")
MAX_DIGITS = 12


class PrecisionError(ValueError):
    """A `precision` entry that is missing or malformed; the message says what was found."""


@dataclass(frozen=True)
class Precision:
    kind: str  # one of KINDS
    digits: int = 0

    @property
    def phrase(self) -> str:
        """How the precision reads inside a sentence: 'to 3 significant figures'."""
        if self.kind == "exact":
            return "as an exact whole number"
        noun = "significant figure" if self.kind == "sig" else "decimal place"
        return f"to {self.digits} {noun}{'' if self.digits == 1 else 's'}"

    @property
    def label(self) -> str:
        """The precision as a short label for keys: '3 significant figures', 'exact'."""
        return "exact" if self.kind == "exact" else self.phrase.removeprefix("to ")

    def unit(self, value: float) -> float:
        """One unit of the last digit asked for, at this value (0 for an exact answer)."""
        if self.kind == "exact":
            return 0.0
        if self.kind == "decimals":
            return 10.0**-self.digits
        exponent = int(f"{value:.{self.digits - 1}e}".split("e")[1])
        return 10.0 ** (exponent - self.digits + 1)

    def rounded(self, value: float) -> str:
        """The value written the way the question asks for it: 17200000, 0.0500, 42.9, 1250."""
        if self.kind == "exact":
            return str(int(round(value)))
        if self.kind == "decimals":
            return f"{value:.{self.digits}f}"
        return format(Decimal(f"{value:.{self.digits - 1}e}"), "f")


def parse_precision(raw: Any) -> Precision:
    """`"exact"`, `{ sig = 3 }` or `{ decimals = 1 }` from a bank; anything else is an error."""
    if raw is None:
        raise PrecisionError("missing")
    if raw == "exact":
        return Precision("exact")
    if isinstance(raw, dict) and len(raw) == 1:
        ((kind, digits),) = raw.items()
        if kind in ("sig", "decimals") and isinstance(digits, int) and not isinstance(digits, bool):
            low = 1 if kind == "sig" else 0
            if low <= digits <= MAX_DIGITS:
                return Precision(kind, digits)
            raise PrecisionError(f"{kind} = {digits} is outside {low}..{MAX_DIGITS}")
    raise PrecisionError(f"{raw!r} is not a precision")


def instruction(precision: Precision, unit: str) -> str:
    """The sentence every numeric question ends with, so the precision is never hidden."""
    where = {"": "", "×": " as a factor (×)", "%": " in percent"}.get(unit, f" in {unit}")
    comma = "," if where else ""
    return f"Give your answer{where}{comma} {precision.phrase}."


def is_whole(value: float) -> bool:
    """True for values a person would call whole numbers, allowing float noise like 3.0000000000000004."""
    return math.isfinite(value) and abs(value - round(value)) <= 1e-9 * max(1.0, abs(value))
