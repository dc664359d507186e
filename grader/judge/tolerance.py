"""The one place where the judge decides that two numbers are the same, within a tolerance.

Every check and judge module asks here instead of calling np.allclose or math.isclose itself, so that
what "close" means is written once: in particular that a value the ranks did not report (None), or
one of another shape, is never close to anything. numpy's allclose would broadcast a wrong shape
into a pass, or raise inside the grader. Each caller keeps its own tolerances: they say what the
comparison measures (fp32 sums over ranks, a replay, an exact copy) and stay next to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

_NUMERIC = frozenset("biufc")  # numpy dtype kinds that compare as numbers


def close(got: object, want: object, *, rtol: float, atol: float) -> bool:
    """Whether `got` equals the reference `want` within |got - want| <= atol + rtol * |want|, element by
    element (numpy's rule: the tolerance scales with the reference). Scalars, lists and arrays alike;
    None, a ragged or non-numeric value, or another shape is never close."""
    if got is None or want is None:
        return False
    try:
        actual, expected = np.asarray(got), np.asarray(want)
    except ValueError:  # a ragged list
        return False
    if actual.shape != expected.shape or actual.dtype.kind not in _NUMERIC or expected.dtype.kind not in _NUMERIC:
        return False
    return bool(np.allclose(actual, expected, rtol=rtol, atol=atol))


def close_each(got: Sequence[object], want: Sequence[object], *, rtol: float, atol: float) -> bool:
    """`close` for two lists of tensors (one per parameter, say), which may differ in shape from each other."""
    return len(got) == len(want) and all(close(a, b, rtol=rtol, atol=atol) for a, b in zip(got, want))


def close_either_way(a: float | None, b: float | None, *, rtol: float, atol: float) -> bool:
    """Whether two numbers agree within rtol of the larger of them, or atol (math.isclose's rule): the
    tolerance does not depend on which one is the reference (a slip's prediction against a student's value)."""
    if a is None or b is None:
        return False
    return math.isclose(a, b, rel_tol=rtol, abs_tol=atol)


def relative_difference(got: object, want: object) -> float:
    """The largest |got - want| over the largest |want| (the reference's scale, at least 1e-12): how far a
    tensor is from the reference, as a fraction of the reference. Infinite for None, another shape or a
    non-numeric value, which are never close."""
    if got is None or want is None:
        return math.inf
    try:
        actual, expected = np.asarray(got), np.asarray(want)
    except ValueError:
        return math.inf
    if actual.shape != expected.shape or actual.dtype.kind not in _NUMERIC or expected.dtype.kind not in _NUMERIC:
        return math.inf
    if not expected.size:
        return 0.0
    return float(np.max(np.abs(actual - expected))) / max(float(np.max(np.abs(expected))), 1e-12)
