"""Wall time of one ex03 check at W=2 when the ranks call different collectives (issue 31: a collective
mismatch fails in seconds, target at most 5 s), beside the correct solution's.

Not a timed test. Each case is a variant of solutions/ex03_train_ddp.py (an exercise that builds DDP, so
torch's TORCH_DISTRIBUTED_DEBUG=DETAIL is off and gloo alone would see the mismatch), graded by
`ranks_stay_in_sync` alone on a warm engine, with the grader found on PYTHONPATH (so an older checkout of
the grader can be timed the same way):

    PYTHONPATH=. python benchmarks/bench_mismatch.py [--rounds 3] [CASE ...]

Prints each case's median and slowest time, and the first line of its verdict.

Measured 2026-11-28 on the 2-core machine, 3 rounds, median (slowest). Before (5799df5), load ~5:
correct 0.22 s (0.28); barrier_on_rank_zero_only 0.27 s (0.27), "rank 0 raised RuntimeError: ...
Connection reset by peer ... GLHF!"; all_reduce_against_broadcast 28.24 s (28.33) and another_root
28.26 s (28.36), gloo's "Timed out waiting 28000ms"; different_sizes 0.21 s (0.30), "rank 0 aborted
(SIGABRT)". After, load 7-11: correct 0.58 s (0.82); barrier_on_rank_zero_only 0.53 s (0.64),
all_reduce_against_broadcast 1.58 s (1.74), different_sizes 0.58 s (0.82), another_root 1.68 s (1.69),
each "ranks called different collectives: rank 0 called ..., rank 1 ...". The correct solution alone,
10 rounds twice, before and after alternately at load ~3: 0.21/0.19 s before, 0.18/0.17 s after.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from grader.catalog import load_catalog
from grader.engine import Engine
from grader.judge.runner import ALL_CHECKS, GradeOptions, grade_exercise

REPO = Path(__file__).resolve().parent.parent
EXERCISE, CHECK = "ex03_train_ddp", "ranks_stay_in_sync"
SAVE = "    if rank == 0:\n        torch.save(model.state_dict(), checkpoint_path)\n    dist.barrier()\n"
CASES = {
    "correct": (SAVE, SAVE),
    "barrier_on_rank_zero_only": (SAVE, SAVE.replace("\n    dist.barrier()", "\n        dist.barrier()")),
    "all_reduce_against_broadcast": (
        SAVE,
        "    if rank == 0:\n        dist.all_reduce(torch.zeros(4))\n    else:\n"
        "        dist.broadcast(torch.zeros(4), src=0)\n" + SAVE,
    ),
    "different_sizes": (SAVE, "    dist.all_reduce(torch.zeros(4 + rank))\n" + SAVE),
    "another_root": (SAVE, "    dist.broadcast(torch.zeros(4), src=rank)\n" + SAVE),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"of {', '.join(CASES)} (default: all)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    catalog = load_catalog(REPO)
    exercise = catalog.get(EXERCISE)
    source = (REPO / "solutions" / exercise.file).read_text()
    options = GradeOptions(world_sizes=(2,), only=frozenset({CHECK}), visibilities=ALL_CHECKS, seed=0)
    with Engine(preload=[exercise.workers_module]) as engine, tempfile.TemporaryDirectory() as folder:
        engine.wait_warm()
        for case in args.cases or CASES:
            old, new = CASES[case]
            assert old in source, old
            path = Path(folder, case, exercise.file)
            path.parent.mkdir()
            path.write_text(source.replace(old, new, 1))
            seconds, message = [], ""
            for _ in range(args.rounds):
                started = time.perf_counter()
                [result] = grade_exercise(engine, exercise, path, options)
                seconds.append(time.perf_counter() - started)
                message = result.message.splitlines()[0] if result.message else result.status
            print(f"{case}: {statistics.median(seconds):.2f} s median, {max(seconds):.2f} s slowest: {message[:160]}")


if __name__ == "__main__":
    main()
