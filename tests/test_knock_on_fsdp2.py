"""A full state dict gathered on rank 0 alone at the end of train (ex16, ex18): rank 0 waits in an all-gather its
peers never join. The grader's own gather of the trained weights used to join it, so the run ended with gloo's
"Connection reset by peer" blamed on the grader's gather. Now the grader gathers only once every rank returned
from train (RankContext.returned_from): the mismatch is named, it costs matches_reference alone, and the checks
whose facts were complete before it (every step taken) are judged on them."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from conftest import describe
from variants import REPO, materialize


@pytest.mark.parametrize(("exercise_id", "world_size"), [("ex16_mixed_precision", 2), ("ex18_fsdp_tp_2d", 4)])
def test_a_lone_gather_after_training_costs_matches_reference_alone(
    grade, catalog, tmp_path: Path, exercise_id: str, world_size: int
) -> None:
    mistakes = tomllib.loads((REPO / "tests" / "mistakes" / f"{exercise_id}.toml").read_text())["mistake"]
    mistake = next(m for m in mistakes if m["name"] == "full_state_dict_on_rank0_at_the_end")
    path = materialize(catalog.get(exercise_id).file, mistake, tmp_path)
    results = grade(exercise_id, path, world_sizes=(world_size,))
    for result in results:
        if result.check == "matches_reference":
            assert result.status == "failed" and "ranks called different collectives" in result.message, describe(
                [result]
            )
            assert "Connection reset" not in result.message, describe([result])
        else:
            assert result.status == "passed", describe([result])
            assert "recorded before the run failed" in result.details, describe([result])
