"""Workers for tests/engine/test_report_channel.py: the grader's side of a run whose code under test
(channel_student.py) goes after the report channel or after what the grader installed."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_pre_hook

from grader.engine.rank_runtime import RankContext
from grader.rank.patches import Patches


def honest_facts(rank: int) -> dict[str, Any]:
    """What every rank reports, of each kind the wire carries: the report that must reach the grader unchanged."""
    return {
        "value": 1.5 + rank,
        "text": "the grader's",
        "array": np.arange(4, dtype=np.int64) * (rank + 1),
        "tensor": torch.tensor([1.0, 2.0]) * (rank + 1),
        "bf16": torch.ones(2, dtype=torch.bfloat16, requires_grad=True),
        "nested": {"a": [1, None, True], "b": np.float32(0.5)},
    }


def reports_after_rebinding(ctx: RankContext, names: list[str]) -> dict[str, Any]:
    """Form the group at the launcher's rendezvous (rank 0's store sees it), then let the code under test rebind
    `names`, then report."""
    dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    dist.barrier()
    facts = honest_facts(ctx.rank)
    ctx.student("rebind")(names)
    return facts


def forges(ctx: RankContext, how: str) -> dict[str, Any]:
    """Let the code under test write into the report channel itself (channel_student.forge)."""
    ctx.student("forge")(how)
    return honest_facts(ctx.rank)


def records_then_calls(ctx: RankContext) -> dict[str, Any]:
    """Record facts as spies do (into ctx.facts, while the code under test runs), then call it."""
    ctx.facts.update(honest_facts(ctx.rank))
    ctx.student("edit_facts")()
    return {}


def reads_back(ctx: RankContext) -> dict[str, Any]:
    """What the code under test gets when it tries to read its report channel back (the runtime's opening)."""
    return ctx.student("read_back")()


def _step_hook(*_: Any) -> None:
    """An optimizer step hook of the grader's."""


def tampers(ctx: RankContext, what: str) -> dict[str, Any]:
    """Install a spy, a patch and an optimizer step hook, as workers do, before the student's file loads; let the code
    under test tamper with `what`; put back the patch and remove the hook, as workers do when done."""
    ctx.spy(dist, "all_reduce")
    patches = Patches()
    patches.replace(torch.nn.Module, "train", torch.nn.Module.train)
    handle = register_optimizer_step_pre_hook(_step_hook)
    ctx.student("tamper")(what)
    patches.restore()
    handle.remove()
    return {}
