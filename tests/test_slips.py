"""The slip search names a slip only when it reproduces every probed input, and only one."""

from __future__ import annotations

import pytest

from grader.judge.names import Cause
from grader.judge.slips import UNITS, Formula, Slip, find_slip, matching_slips, scaled

RING = Formula(("m", "w"), "2 * (w - 1) / w * m")
RING_PROBES = [(m, w) for m in (1e6, 4e8) for w in (1, 2, 3, 4, 8, 1024)]
AMDAHL = Formula(("p", "n"), "1 / ((1 - p) + p / n)")
AMDAHL_PROBES = [(p, n) for p in (0.0, 0.5, 0.9, 0.99, 1.0) for n in (1, 2, 4, 8, 64, 10**6)]
SECONDS = Formula(("m", "w", "bandwidth"), "2 * (w - 1) / w * m / bandwidth")
SECONDS_PROBES = [(4e8, w, bw) for w in (2, 3, 8, 1024) for bw in (12.5e9, 25e9, 300e9)]


def values(function, probes):
    return [function(*args) for args in probes]


def test_formula_is_its_expression():
    assert RING(1e6, 4) == pytest.approx(1.5e6)
    assert AMDAHL(0.5, 2) == pytest.approx(4 / 3)


def test_right_values_name_nothing():
    assert find_slip(RING, RING_PROBES, values(RING, RING_PROBES)) is None


def test_floor_division_in_the_ring_volume():
    got = values(lambda m, w: 2 * (w - 1) // w * m, RING_PROBES)
    slip = find_slip(RING, RING_PROBES, got)
    assert slip is not None and slip.proven.cause == "floor_division"
    assert "2 * (w - 1) // w" in slip.sentence


def test_fraction_taken_as_percentage():
    got = values(lambda p, n: AMDAHL(p / 100, n), AMDAHL_PROBES)
    assert got[AMDAHL_PROBES.index((0.5, 2))] == pytest.approx(1.0025, rel=1e-3)  # the value
    slip = find_slip(AMDAHL, AMDAHL_PROBES, got, params=("parallel_fraction", "n"))
    assert slip is not None and slip.proven.cause == "parallel_fraction_as_percentage"
    times_100 = find_slip(AMDAHL, AMDAHL_PROBES, values(lambda p, n: AMDAHL(p * 100, n), AMDAHL_PROBES))
    assert times_100 is not None and times_100.proven.cause == "p_times_100"


def test_result_as_percentage():
    efficiency = Formula(("p", "n"), "1 / ((1 - p) + p / n) / n")
    slip = find_slip(efficiency, AMDAHL_PROBES, values(lambda p, n: 100 * efficiency(p, n), AMDAHL_PROBES))
    assert slip is not None and slip.proven.cause == "result_as_percentage"


@pytest.mark.parametrize(("factor", "prefix"), UNITS)
def test_unit_scales(factor, prefix):
    divided = find_slip(RING, RING_PROBES, values(lambda m, w: RING(m, w) / factor, RING_PROBES))
    multiplied = find_slip(RING, RING_PROBES, values(lambda m, w: RING(m, w) * factor, RING_PROBES))
    assert divided is not None and divided.proven.cause == f"unit_{prefix}_divided"
    assert multiplied is not None and multiplied.proven.cause == f"unit_{prefix}_multiplied"


@pytest.mark.parametrize(("factor", "name"), [(0.5, "factor_2_missing"), (2.0, "factor_2_doubled")])
def test_factor_2(factor, name):
    slip = find_slip(SECONDS, SECONDS_PROBES, values(lambda m, w, b: SECONDS(m, w, b) * factor, SECONDS_PROBES))
    assert slip is not None and slip.proven.cause == name


@pytest.mark.parametrize(("shift", "name"), [(-1, "world_size_minus_1"), (1, "world_size_plus_1")])
def test_world_size_off_by_one(shift, name):
    got = values(lambda m, w, b: SECONDS(m, w + shift, b), SECONDS_PROBES)
    slip = find_slip(SECONDS, SECONDS_PROBES, got, params=("message_bytes", "world_size", "bandwidth"))
    assert slip is not None and slip.proven.cause == name


def test_arguments_swapped():
    got = values(lambda m, w, b: SECONDS(w, m, b), SECONDS_PROBES)
    slip = find_slip(SECONDS, SECONDS_PROBES, got, params=("message_bytes", "world_size", "bandwidth"))
    assert slip is not None and slip.proven.cause == "message_bytes_world_size_swapped"


def test_sent_and_received_replaces_the_generic_factor_2():
    both = Slip(Cause("sent_and_received_counted"), "counts what it receives too", scaled(2.0), key="factor_2_doubled")
    slip = find_slip(RING, RING_PROBES, values(lambda m, w: 2 * RING(m, w), RING_PROBES), named=[both])
    assert slip is not None and (slip.sentence, slip.proven.cause) == (both.sentence, both.name)


def test_a_coincidence_at_one_input_is_not_named():
    """M x W is twice the ring's volume at W=2 (sent and received both counted) and nowhere else."""
    wrong = lambda m, w: m * w  # noqa: E731
    at_w2 = [(1e6, 2)]
    assert find_slip(RING, at_w2, values(wrong, at_w2)) is not None  # one input: it looks like a slip
    assert find_slip(RING, RING_PROBES, values(wrong, RING_PROBES)) is None  # every input: it is not


def test_two_names_for_the_same_values_name_neither():
    other = Slip(Cause("doubled_somewhere_else"), "another story for the same numbers", scaled(2.0))
    got = values(lambda m, w: 2 * RING(m, w), RING_PROBES)
    assert {s.name for s in matching_slips(RING, RING_PROBES, got, named=[other])} == {
        "doubled_somewhere_else",
        "factor_2_doubled",
    }
    assert find_slip(RING, RING_PROBES, got, named=[other]) is None


def test_a_slip_that_cannot_be_evaluated_reproduces_nothing():
    """W-1 divides by zero at W=1: that slip is no match there, whatever the student returned."""
    got = [0.0 if w == 1 else RING(m, w - 1) for m, w in RING_PROBES]
    assert find_slip(RING, RING_PROBES, got) is None
    table = {args: RING(*args) for args in RING_PROBES}
    only_the_table = lambda *args: table[args]  # noqa: E731  (a student copy knows only the public inputs)
    shifted = values(lambda m, w: RING(m, w + 1), RING_PROBES)
    assert find_slip(only_the_table, RING_PROBES, shifted) is None
    halved = find_slip(only_the_table, RING_PROBES, values(lambda m, w: RING(m, w) / 2, RING_PROBES))
    assert halved is not None and halved.proven.cause == "factor_2_missing"


RING_LINE = "return 2.0 * (world_size - 1) / world_size * message_bytes"
AMDAHL_LINE = "return 1.0 / ((1.0 - parallel_fraction) + parallel_fraction / n)"


@pytest.mark.parametrize(
    ("check", "old", "new", "cause"),
    [
        ("allreduce_cost", RING_LINE, "return 2 * (world_size - 1) // world_size * message_bytes", "floor_division"),
        ("allreduce_cost", RING_LINE, "return message_bytes * world_size", ""),  # 2x the ring at W=2 only
        (
            "amdahl",
            AMDAHL_LINE,
            "return 1.0 / ((1.0 - parallel_fraction / 100) + parallel_fraction / 100 / n)",
            "parallel_fraction_as_percentage",
        ),
        # off the grid (the hidden check's random inputs) too, and only if the grid's values agree
        (
            "holds_off_grid",
            AMDAHL_LINE,
            "return 1.0 / ((1.0 - parallel_fraction / 100) + parallel_fraction / 100 / n)",
            "parallel_fraction_as_percentage",
        ),
        (
            "holds_off_grid",
            AMDAHL_LINE,
            "return 1.0 / ((1.0 - parallel_fraction) + parallel_fraction / n) if n in (1, 2, 4, 8, 64, 10**6) else 1.0",
            "",
        ),  # right on the grid, 1 elsewhere: no slip ("p never divided by n") gives the grid's values
    ],
)
def test_the_verdict_names_a_cause_only_when_a_slip_is_proven(grade, catalog, tmp_path, check, old, new, cause):
    from variants import materialize

    path = materialize(catalog.get("ex10").file, {"name": "slip", "replace": [[old, new]]}, tmp_path)
    [result] = grade("ex10", path, world_sizes=(1,), checks={check})
    assert result.status == "failed", result.message
    assert result.cause == cause, result.message
