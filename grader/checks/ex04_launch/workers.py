"""Rank side of exercise 4: one process calls the student's launcher on functions of ours.

The launched functions leave evidence the launcher cannot fake: a marker file when they finish,
their own pid, the arguments they received.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from grader.engine.rank_runtime import RankContext

FAILING_RANK_MESSAGE = "planted failure on the last rank"
SLOW_RANK_SECONDS = 8.0


def report_identity(rank: int, world_size: int, token: str, marker_dir: str) -> dict[str, Any]:
    time.sleep(0.1)
    Path(marker_dir, f"done-{rank}").touch()
    return {"rank": rank, "world_size": world_size, "token": token, "pid": os.getpid()}


def fail_on_last_rank(rank: int, world_size: int) -> None:
    if rank == world_size - 1:
        raise ValueError(FAILING_RANK_MESSAGE)
    time.sleep(SLOW_RANK_SECONDS)


def _children() -> list[int]:
    """Processes whose parent is this one, running or not yet reaped."""
    pids = []
    for task in Path("/proc/self/task").iterdir():
        try:
            pids += [int(pid) for pid in (task / "children").read_text().split()]
        except OSError:
            pass
    return pids


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def launch_identity(ctx: RankContext, world_size: int, start_method: str) -> dict[str, Any]:
    launch = ctx.student("launch_distributed")
    markers = ctx.run_dir / "markers"
    markers.mkdir()
    ctx.facts["launcher_pid"] = os.getpid()
    started = time.perf_counter()
    results = launch(report_identity, world_size, ("token-42", str(markers)), start_method)
    ctx.facts["seconds"] = time.perf_counter() - started
    ctx.facts["children_after_return"] = len(_children())
    ctx.facts["finished_at_return"] = sorted(p.name for p in markers.iterdir())
    ctx.facts["results"] = _plain(results)
    return {}


def launch_failing(ctx: RankContext, world_size: int, start_method: str) -> dict[str, Any]:
    launch = ctx.student("launch_distributed")
    started = time.perf_counter()
    try:
        launch(fail_on_last_rank, world_size, (), start_method)
        ctx.facts["raised"] = None
    except NotImplementedError:
        raise  # the untouched stub: "not implemented yet", not "an error without a traceback"
    except Exception as exc:
        ctx.facts["raised"] = {"type": type(exc).__name__, "message": str(exc)[-4000:]}
    ctx.facts["seconds"] = time.perf_counter() - started
    ctx.facts["children_after_return"] = len(_children())
    return {}
