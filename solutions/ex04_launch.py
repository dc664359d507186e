"""Reference solution for exercise 4: launch W processes and collect their results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.multiprocessing as mp

POLL_S = 0.05


def _run_and_report(rank: int, fn: Callable[..., Any], world_size: int, args: tuple, results: Any) -> None:
    results.put((rank, fn(rank, world_size, *args)))


def launch_distributed(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    start_method: str = "spawn",
) -> list[Any]:
    """Start the processes, read their results while they run, then wait for every one to exit.

    The results are read before the processes are joined: a process cannot exit until its result
    has been read from the queue (a pipe holds about 64 KB), so reading only after join=True would
    wait forever on a large result. join(timeout) raises a failed rank's error, with its
    traceback, as soon as that rank has died, after stopping the others.
    """
    results = mp.get_context(start_method).SimpleQueue()
    context = mp.start_processes(
        _run_and_report,
        args=(fn, world_size, tuple(args), results),
        nprocs=world_size,
        join=False,
        start_method=start_method,
    )
    gathered: dict[int, Any] = {}
    while len(gathered) < world_size:
        if not results.empty():
            rank, value = results.get()
            gathered[rank] = value
        elif context.join(timeout=POLL_S) and results.empty():
            missing = sorted(set(range(world_size)) - set(gathered))
            raise RuntimeError(f"the processes of ranks {missing} exited without sending a result")
    while not context.join():
        pass
    return [gathered[rank] for rank in range(world_size)]
