"""How much a check costs: the engine's per-run overhead against a plain mp.spawn launch of the
same work, measured in the same process run, and the wall time of `grader check --solutions --all`.

    python benchmarks/bench_engine.py [--repeats N]

The work is what every check starts with: form a gloo group of W ranks and run one all_reduce.
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


def _one_all_reduce(rank: int, world_size: int, init_method: str) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=30))
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


def time_engine(world_size: int, repeats: int) -> tuple[float, float]:
    """(first-run seconds including the zygote's warm-up, median of the warm runs)."""
    from grader.engine import Engine, Job

    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    job = Job("bench_engine:engine_worker", world_size)
    with Engine(preload=["bench_engine"]) as engine:
        started = time.perf_counter()
        assert engine.run(job).ok
        first = time.perf_counter() - started
        warm = []
        for _ in range(repeats):
            started = time.perf_counter()
            result = engine.run(job)
            warm.append(time.perf_counter() - started)
            assert result.ok, [r.error or r.report_problem for r in result.ranks]
    return first, statistics.median(warm)


def time_solutions() -> float:
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "grader", "check", "--solutions", "--all"],
                               cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"grader check --solutions --all failed:\n{completed.stdout}\n{completed.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    print(f"{'W':>2} {'mp.spawn':>10} {'engine warm':>12} {'engine first':>13} {'ratio':>8}")
    for world_size in (2, 4):
        spawn = statistics.median(time_spawn(world_size) for _ in range(3))
        first, warm = time_engine(world_size, args.repeats)
        print(f"{world_size:>2} {spawn:>9.3f}s {warm:>11.3f}s {first:>12.3f}s {warm / spawn:>8.3f}")
    print(f"grader check --solutions --all: {time_solutions():.1f}s wall (warm-up included)")


if __name__ == "__main__":
    main()
