"""ex16 on gloo holds every step's loss to the tolerance of the same casts (2e-4), as the first gradient: a loss
computed in bf16 at W=2 shows first in the losses on some seeds (seed 0: step 3), and is named by its replay there,
with no advice to look at the optimizer."""

from __future__ import annotations

import tomllib
from pathlib import Path

from conftest import describe
from variants import REPO, materialize


def test_a_loss_in_bf16_at_two_ranks_is_named_where_only_the_losses_show_it(grade, catalog, tmp_path: Path) -> None:
    mistakes = tomllib.loads((REPO / "tests" / "mistakes" / "ex16_mixed_precision.toml").read_text())["mistake"]
    mistake = next(m for m in mistakes if m["name"] == "loss_in_bf16")
    path = materialize(catalog.get("ex16_mixed_precision").file, mistake, tmp_path)
    (result,) = grade("ex16_mixed_precision", path, world_sizes=(2,), checks={"matches_reference"}, seed=0)
    assert result.status == "failed" and result.cause == "bf16_loss", describe([result])
    assert result.message.startswith("step 3, rank 0: loss"), describe([result])
    assert "look at the optimizer" not in result.message, describe([result])
