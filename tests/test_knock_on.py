"""One failure, said once: checks that share a failed run of the student's code point at the check that said it.

A barrier inside `if rank == 0:` ends ex03's shared training run with a collective mismatch. Before, each of the
four checks sharing that run repeated the failure and its traceback; now the first says it, with the traceback and
the hint, and the others say they were not judged, naming that check (issue: knock-on failures). A file that
cannot be imported is an error of every check alike, not a failed run: those keep one message, said once.
"""

from __future__ import annotations

from pathlib import Path

from conftest import describe
from variants import materialize

BARRIER_IN_THE_IF = {
    "replace": [
        [
            "        torch.save(model.state_dict(), checkpoint_path)\n    dist.barrier()",
            "        torch.save(model.state_dict(), checkpoint_path)\n        dist.barrier()",
        ]
    ]
}
SHARED = ["ranks_stay_in_sync", "matches_large_batch", "checkpoint_rank0_only", "checkpoint_loads_plain"]


def test_checks_sharing_a_failed_run_point_at_the_one_that_says_why(grade, catalog, tmp_path: Path) -> None:
    exercise = catalog.get("ex03_train_ddp")
    path = materialize(exercise.file, BARRIER_IN_THE_IF, tmp_path)
    results = {r.check: r for r in grade("ex03_train_ddp", path, world_sizes=(2,), checks=set(SHARED))}
    first, *others = (results[name] for name in SHARED)
    assert first.status == "failed" and "ranks called different collectives" in first.message, describe([first])
    assert "dist.barrier()" in first.details  # the student's line, once
    for result in others:
        assert result.status == "failed" and result.points == 0, describe([result])
        assert result.message.startswith("not judged: the run it shares with ranks_stay_in_sync failed"), describe(
            [result]
        )
        assert "ranks called different collectives" not in result.message, "the failure is said once"
        assert result.details == "" and result.verbose_details == "" and result.hint is None and result.cause == ""
