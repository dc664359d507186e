"""Trusted workers that report what a rank process can see and do: its accelerators, the time an
all-reduce takes and the torch APIs the exercises use (`grader doctor` judges all three;
`grading.BackendProbe` reads the first)."""

from __future__ import annotations

import importlib
import time
from typing import Any

from grader.engine.rank_runtime import RankContext

WARM_UP_ITERATIONS = 3


def accelerators(ctx: RankContext) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    available = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if available else 0
    facts: dict[str, Any] = {
        "cuda": available,
        "gpus": gpus,
        "nccl": dist.is_available() and dist.is_nccl_available(),
        "gloo": dist.is_available() and dist.is_gloo_available(),
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda or "",
        "names": [torch.cuda.get_device_name(i) for i in range(gpus)],
        "p2p": [
            [i, j, bool(torch.cuda.can_device_access_peer(i, j))] for i in range(gpus) for j in range(gpus) if i != j
        ],
    }
    if facts["nccl"] and available:
        try:
            version = torch.cuda.nccl.version()
            facts["nccl_version"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        except (RuntimeError, AttributeError) as exc:
            facts["nccl_version_error"] = str(exc)
    return facts


def all_reduce_timing(ctx: RankContext, megabytes: float, iterations: int) -> dict[str, Any]:
    """Seconds per all-reduce of a float32 buffer of `megabytes`, after a warm-up, on this rank;
    then one all-reduce of (rank + 1) everywhere, whose result the judge checks. Rank 0 also
    reports its accelerators (one run tells `grader doctor` both)."""
    import torch
    import torch.distributed as dist

    ctx.init_group()
    buffer = torch.zeros(int(megabytes * 2**20) // 4, device=ctx.device)

    def settle() -> None:
        if buffer.is_cuda:
            torch.cuda.synchronize()

    for _ in range(WARM_UP_ITERATIONS):
        dist.all_reduce(buffer)
    settle()
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(buffer)
    settle()
    seconds = (time.perf_counter() - started) / iterations
    check = torch.full((4,), float(ctx.rank + 1), device=ctx.device)
    dist.all_reduce(check)
    dist.destroy_process_group()
    facts = {"bytes": buffer.numel() * 4, "seconds": seconds, "reduced": check.cpu()}
    if ctx.rank == 0:
        facts["accelerators"] = accelerators(ctx)
    return facts


def _resolve(dotted: str) -> str:
    """ "" when `dotted` (a module, or an attribute path inside one) exists in this torch, else what is missing."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            found: Any = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                continue  # no such module: the name may be an attribute of a shorter one
            return f"importing {module} failed: {exc}"
        except Exception as exc:  # a module that exists and fails to import says why
            return f"importing {module} failed: {type(exc).__name__}: {exc}"
        for index, name in enumerate(parts[cut:], cut):
            if not hasattr(found, name):
                return f"{'.'.join(parts[:index])} has no {name}"
            found = getattr(found, name)
        return ""
    return f"no module {parts[0]}"


def torch_apis(ctx: RankContext, apis: list[str]) -> dict[str, Any]:
    """Each API: "" where this rank's torch has it, else what is missing."""
    return {"apis": {api: _resolve(api) for api in apis}}
