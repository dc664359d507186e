"""Rank side of exercise 8: call the student's ring all-reduce on tensors of ours, counting every
byte this rank sends and every built-in collective it starts.

The spies sit on the process group object itself (`ProcessGroup.send`, `.allreduce`, ...), which
every route goes through: `dist.send`, `dist.isend`, `batch_isend_irecv`, or the group directly.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C._distributed_c10d import ProcessGroup

from grader.checks.ex08_ring_allreduce.inputs import rank_input
from grader.engine.rank_runtime import RankContext

COLLECTIVES = (
    "allreduce",
    "allreduce_coalesced",
    "allgather",
    "_allgather_base",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced",
    "broadcast",
    "reduce",
    "alltoall",
    "alltoall_base",
    "scatter",
    "gather",
)


def _sent_bytes(group: Any, tensors: list[torch.Tensor], *rest: Any, **kwargs: Any) -> dict[str, Any]:
    return {"bytes": sum(t.numel() * t.element_size() for t in tensors)}


def ring(ctx: RankContext, shapes: list[list[int]], seed: int) -> dict[str, Any]:
    """For each shape: the tensor after the student's call (its input is the judge's to know), the
    bytes and the number of messages sent."""
    ctx.init_group()
    sent = ctx.spy(ProcessGroup, "send", _sent_bytes)
    ctx.facts["collectives"] = {name: ctx.spy(ProcessGroup, name) for name in COLLECTIVES}
    ring_all_reduce = ctx.student("ring_all_reduce")
    ctx.facts["calls"] = []
    for index, shape in enumerate(shapes):
        tensor = torch.from_numpy(rank_input(seed, index, ctx.rank, shape))
        call: dict[str, Any] = {"sent_before": len(sent)}
        ctx.facts["calls"].append(call)
        returned = ring_all_reduce(tensor)
        # What the tensor became, as facts the judge can always read: its values only when they are
        # still float32 (a complex or bfloat16 tensor could not even be reported).
        call["dtype"] = str(tensor.dtype).removeprefix("torch.")
        call["shape"] = list(tensor.shape)
        call["output"] = tensor.detach().clone() if tensor.dtype == torch.float32 else None
        call["returned_tensor"] = isinstance(returned, torch.Tensor)
        messages = sent[call.pop("sent_before") :]
        call["bytes"] = sum(s["bytes"] for s in messages)
        call["messages"] = len(messages)
    return {}
