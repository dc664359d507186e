"""A named cause is a proven cause, by construction (grader/judge/proof.py).

Only the proof path builds a `Proven`, only the replay modules call `replayed`, and a check hands a verdict its
cause through `proven=` alone: no `cause=` keyword reaches `fail`, `Verdict` or `CheckFailed` outside the api that
turns a `Proven` into the verdict's field, and a `Finding` has no cause of its own to set.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from grader.judge.names import Cause
from grader.judge.proof import Proven, replayed, structural
from grader.judge.trajectory import Finding

GRADER = Path(__file__).resolve().parents[1] / "grader"
BUILDS_PROVEN = {"judge/proof.py"}
CALLS_REPLAYED = {"judge/replay.py", "judge/slips.py"}
SETS_THE_VERDICTS_CAUSE = {"judge/api.py"}  # `fail` turns a Proven into Verdict.cause
VERDICT_MAKERS = {"fail", "Verdict", "CheckFailed"}


def _calls() -> list[tuple[str, ast.Call]]:
    found = []
    for path in sorted(GRADER.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        where = path.relative_to(GRADER).as_posix()
        found += [(where, node) for node in ast.walk(tree) if isinstance(node, ast.Call)]
    return found


def _name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


CALLS = _calls()


def test_only_the_proof_module_builds_a_proven_cause() -> None:
    builders = sorted({f"{where}:{call.lineno}" for where, call in CALLS if _name(call) == "Proven"})
    assert all(site.split(":")[0] in BUILDS_PROVEN for site in builders), builders
    assert builders, "the proof module builds Proven itself"


def test_only_the_replay_modules_call_replayed() -> None:
    callers = sorted({f"{where}:{call.lineno}" for where, call in CALLS if _name(call) == "replayed"})
    assert {site.split(":")[0] for site in callers} <= CALLS_REPLAYED, callers
    assert {site.split(":")[0] for site in callers} == CALLS_REPLAYED, "replay.prove and slips.find_slip prove causes"


def test_no_check_hands_a_verdict_a_cause_outside_the_proof_path() -> None:
    outside = sorted(
        f"{where}:{call.lineno}"
        for where, call in CALLS
        if _name(call) in VERDICT_MAKERS
        and where not in SETS_THE_VERDICTS_CAUSE
        and any(keyword.arg == "cause" for keyword in call.keywords)
    )
    assert outside == [], f"a cause given without its proof: {outside}"


def test_a_finding_names_a_cause_only_through_its_proof() -> None:
    assert "cause" not in {f.name for f in dataclasses.fields(Finding)}
    assert Finding("measured only").cause == "measured"
    proof = structural(Cause("no_sampler"), {"sizes": [2, 2]}, {"sizes": [2, 2]})
    assert proof is not None and Finding("named", proven=proof).cause == "no_sampler"


def test_a_structural_replay_proves_only_when_every_field_is_equal() -> None:
    built = {"placements": ["Shard(dim=0)"], "mesh": [0, 1, 2, 3], "state": {"w": np.arange(4)}}
    same = {"placements": ["Shard(dim=0)"], "mesh": [0, 1, 2, 3], "state": {"w": np.arange(4)}}
    proven = structural(Cause("fsdp_over_world"), built, same)
    assert proven == Proven(Cause("fsdp_over_world"), "structure", ("placements", "mesh", "state"))
    # the wrong-cause class of the held-back set: the mesh matches, the placements say otherwise
    assert structural(Cause("fsdp_over_world"), built, same | {"placements": ["Replicate()", "Shard(dim=0)"]}) is None


@pytest.mark.parametrize(
    "observed",
    [
        {"mesh": [0, 1, 2, 3]},  # a field missing
        {"mesh": [0, 1, 2, 3], "placements": ["Shard(dim=0)"], "extra": 1},  # a field the mistake does not build
        {"mesh": [0, 1, 2], "placements": ["Shard(dim=0)"]},  # a shorter list
        {"mesh": [0, 1, 2, 3], "placements": None},  # a missing fact
        {"mesh": [0.0, 1.0, 2.0, 3.0], "placements": ["Shard(dim=0)"]},  # other types: a structure is exact
        {"mesh": "0123", "placements": ["Shard(dim=0)"]},  # a string is not a sequence of its characters
    ],
)
def test_a_structural_replay_refuses_what_differs_in_any_field(observed: dict[str, object]) -> None:
    built = {"mesh": [0, 1, 2, 3], "placements": ["Shard(dim=0)"]}
    assert structural(Cause("fsdp_over_world"), built, observed) is None


def test_nothing_compared_proves_nothing() -> None:
    assert structural(Cause("fsdp_over_world"), {}, {}) is None


def test_a_replayed_cause_says_how_it_was_proven() -> None:
    assert replayed(Cause("loss_summed")) == Proven(Cause("loss_summed"), "replay")
