"""Reference solution for exercise 4: launch W processes and collect their results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.multiprocessing as mp


def _run_and_report(rank: int, fn: Callable[..., Any], world_size: int, args: tuple, results: Any) -> None:
    results.put((rank, fn(rank, world_size, *args)))


def launch_distributed(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    start_method: str = "spawn",
) -> list[Any]:
    """Start the processes, wait for all of them (failures raise here), gather results by rank."""
    results = mp.get_context(start_method).SimpleQueue()
    mp.start_processes(
        _run_and_report,
        args=(fn, world_size, tuple(args), results),
        nprocs=world_size,
        join=True,
        start_method=start_method,
    )
    gathered = dict(results.get() for _ in range(world_size))
    return [gathered[rank] for rank in range(world_size)]
