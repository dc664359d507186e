"""Numeric judgement on the grader's side: tolerances suited to fp32, and named differences.

Every comparison reports the parameter and the largest difference, and `scale_of` measures the
ratio between two gradients so that a mistake can be named from the number (W, k, b...).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.judge.tolerance import close

RTOL, ATOL = 1e-5, 1e-6
Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Difference:
    name: str
    max_abs: float
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.name} differs by up to {self.max_abs:.3g}{self.detail}"


def first_difference(actual: Arrays, expected: Arrays, rtol: float = RTOL, atol: float = ATOL) -> Difference | None:
    """The first parameter (in `expected`'s order) not within tolerance, or None."""
    for name, want in expected.items():
        if name not in actual:
            return Difference(name, float("inf"), " (missing)")
        got = np.asarray(actual[name])
        if got.shape != want.shape:
            return Difference(name, float("inf"), f" (shape {list(got.shape)} instead of {list(want.shape)})")
        if not close(got, want, rtol=rtol, atol=atol):
            return Difference(name, float(np.max(np.abs(got - want))))
    return None


def scale_of(actual: Arrays, expected: Arrays) -> float:
    """The least-squares factor s with actual ≈ s * expected, over all tensors."""
    numerator = sum(float(np.sum(actual[k] * expected[k])) for k in expected if k in actual)
    denominator = sum(float(np.sum(expected[k] * expected[k])) for k in expected)
    return numerator / denominator if denominator else float("nan")


def proportional(actual: Arrays, expected: Arrays, rtol: float = RTOL, atol: float = ATOL) -> float | None:
    """c where actual == c * expected for every tensor (c != 1, c > 0), else None."""
    scale = scale_of(actual, expected)
    if not (np.isfinite(scale) and scale > 0 and abs(scale - 1) > 1e-3):
        return None
    if first_difference(actual, {name: scale * value for name, value in expected.items()}, rtol, atol) is None:
        return scale
    return None


def fraction(value: float) -> str:
    """A positive factor as a message says it: "2 times", "1/4 of" (1/n only for a small whole n)."""
    if value >= 1:
        return f"{value:.4g} times"
    inverse = 1 / value  # 1/n only for the small n a run names (b, W, k); 0.0182 is no "1/55"
    whole = round(inverse)
    return f"1/{whole} of" if whole <= 16 and abs(inverse - whole) < 1e-4 * whole else f"{value:.4g} times"


def near(value: float, target: float, rel: float = 0.02) -> bool:
    return abs(value - target) <= rel * abs(target)
