"""A trusted worker that reports the accelerators a rank process can see."""

from __future__ import annotations

from typing import Any

from grader.engine.rank_runtime import RankContext


def accelerators(ctx: RankContext) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    available = torch.cuda.is_available()
    return {
        "cuda": available,
        "gpus": torch.cuda.device_count() if available else 0,
        "nccl": dist.is_nccl_available(),
        "torch": torch.__version__,
    }
