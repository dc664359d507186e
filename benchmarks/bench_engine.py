"""How much a check costs with each launcher: the engine's per-run overhead with the fork launcher
and with the portable launcher, side by side, against a plain mp.spawn launch of the same work,
all measured in the same process run; then the wall time of `grader check --solutions --all`.

    python benchmarks/bench_engine.py [--repeats N] [--no-solutions]

The work is what every check starts with: form a gloo group of W ranks and run one all_reduce.
- first: the first run, the launcher's warm-up included (the zygote's, or the pool's first members).
- warm: a run that finds its launcher ready; for the portable pool, full (as in `grader watch`, or
  the first runs of a `grader check`). This is the per-check figure after warm-up.
- back-to-back: runs one after another, without waiting: the pool's refill (a torch import per
  rank) then sets the pace; the fork launcher has no refill (its column repeats "warm").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LAUNCHERS = ("fork", "portable")


def _one_all_reduce(rank: int, world_size: int, init_method: str) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=init_method, rank=rank, world_size=world_size, timeout=timedelta(seconds=30)
    )
    total = torch.ones(1)
    dist.all_reduce(total)
    dist.destroy_process_group()
    return float(total[0])


def engine_worker(ctx) -> dict:  # runs on the engine's ranks
    return {"sum": _one_all_reduce(ctx.rank, ctx.world_size, f"file://{ctx.run_dir / 'store'}")}


def _spawn_target(rank: int, world_size: int, init_method: str) -> None:
    _one_all_reduce(rank, world_size, init_method)


def time_spawn(world_size: int) -> float:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        mp.spawn(_spawn_target, args=(world_size, f"file://{folder}/store"), nprocs=world_size, join=True)
        return time.perf_counter() - started


def _timed_run(engine, job) -> float:
    started = time.perf_counter()
    result = engine.run(job)
    seconds = time.perf_counter() - started
    assert result.ok, [r.error or r.report_problem for r in result.ranks]
    return seconds


def time_engine(launcher: str, world_size: int, repeats: int) -> tuple[float, float, float]:
    """(first run with the warm-up, median warm run, median back-to-back run) in seconds."""
    from grader.engine import Engine, Job

    job = Job("bench_engine:engine_worker", world_size)
    with Engine(preload=["bench_engine"], launcher=launcher) as engine:
        first = _timed_run(engine, job)
        warm = []
        for _ in range(repeats):
            engine.wait_warm()
            warm.append(_timed_run(engine, job))
        engine.wait_warm()
        in_a_row = [_timed_run(engine, job) for _ in range(repeats)]
    return first, statistics.median(warm), statistics.median(in_a_row)


def time_solutions(launcher: str) -> float:
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "grader", "check", "--solutions", "--all", "--launcher", launcher],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(
            f"grader check --solutions --all --launcher {launcher} failed:\n{completed.stdout}\n{completed.stderr}"
        )
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-solutions", action="store_true", help="skip `grader check --solutions --all`")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    print(
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
        if hasattr(os, "getloadavg")
        else f"{os.cpu_count()} cores"
    )
    print(
        f"{'W':>2} {'mp.spawn':>9} | {'launcher':>9} {'first':>8} {'warm':>8} {'back-to-back':>13} "
        f"| {'portable/fork warm':>18}"
    )
    for world_size in (2, 4):
        spawn = statistics.median(time_spawn(world_size) for _ in range(3))
        times = {launcher: time_engine(launcher, world_size, args.repeats) for launcher in LAUNCHERS}
        for launcher, (first, warm, in_a_row) in times.items():
            ratio = f"{times['portable'][1] / times['fork'][1]:>18.2f}" if launcher == "portable" else ""
            print(
                f"{world_size:>2} {spawn:>8.3f}s | {launcher:>9} {first:>7.3f}s {warm:>7.3f}s {in_a_row:>12.3f}s "
                f"| {ratio}"
            )
    if not args.no_solutions:
        for launcher in LAUNCHERS:
            print(
                f"grader check --solutions --all --launcher {launcher}: {time_solutions(launcher):.1f}s wall "
                "(warm-up included)"
            )


if __name__ == "__main__":
    main()
