"""Exercise 4: launch W processes and collect their results.

Before any process group exists, something must start the W processes. `torchrun` does it from
the shell; inside Python, `torch.multiprocessing.start_processes` (and its shortcut `mp.spawn`)
does it from a function:

    mp.start_processes(target, args=(a, b), nprocs=W, join=True, start_method="spawn")

calls `target(rank, a, b)` in W new processes, rank = 0..W-1. With `join=True` it waits for all
of them, and if one raises, it terminates the others and raises `ProcessRaisedException` in the
parent, carrying the child's traceback. A launcher that does not wait (`join=False`) or that
catches that exception hides failures and leaves orphan processes.

Processes share no memory, so a return value must travel: create a queue from the same start
method (`mp.get_context(start_method).SimpleQueue()`), pass it to the processes, and let each
put `(rank, result)` on it. The target must be a module-level function (it is pickled to reach a
'spawn' child, which re-imports your module).

The start method: 'spawn' starts a fresh interpreter (safe with CUDA, slow: each child imports
torch again); 'fork' copies the parent (fast, not safe once CUDA is initialised). The grader passes
start_method='fork' to keep checks quick; your code must simply honour it.

Run `grader check ex04` to test, `grader hint ex04` when stuck.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.multiprocessing as mp


def launch_distributed(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    start_method: str = "spawn",
) -> list[Any]:
    """Run fn(rank, world_size, *args) in `world_size` new processes; return their results by rank.

    If any process raises, raise in the caller (with that process's traceback).
    """
    raise NotImplementedError("launch_distributed")
