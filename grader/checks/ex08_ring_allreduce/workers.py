"""Rank side of exercise 8: call the student's ring all-reduce on tensors of ours, counting every
byte this rank sends and every built-in collective it starts.

Both are counted by the shared dispatch-level observer (grader/rank/dispatched_collectives.py), at the
ops every route reaches: `dist.send`, `dist.isend`, `batch_isend_irecv`, the group's own methods, the
functional collectives and `torch.ops.c10d.*` called directly, on the rank's thread or one it starts;
and a backend's own collective methods (`pg._get_backend(device).allreduce`), which no op of the
dispatcher sees, by spies on c10d's Backend. A message's bytes, and the tensor's dtype and shape after the call,
are read only from plain tensors (grader/engine/exact.py): a subclass (or the grader's tensor given another
class) would answer its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._C._distributed_c10d import Backend

from grader.checks.ex08_ring_allreduce.inputs import rank_input
from grader.engine import exact
from grader.engine.rank_runtime import RankContext
from grader.rank.dispatched_collectives import BACKEND_COLLECTIVES, Collective, ObservedThreads, kind_of

SENT, HELD = "send call", "tensor given to ring_all_reduce"  # where a refused object was found, as said


def _offset(part: torch.Tensor, whole: torch.Tensor) -> int | None:
    """Where `part` starts in `whole`'s flat elements, if it is a contiguous view of them; else None."""
    if not part.is_contiguous() or part.untyped_storage().data_ptr() != whole.untyped_storage().data_ptr():
        return None
    start = (part.data_ptr() - whole.data_ptr()) // max(exact.itemsize(whole), 1)
    return start if 0 <= start and start + exact.numel(part) <= exact.numel(whole) else None


def _sent(call: Collective, held: dict[str, torch.Tensor]) -> dict[str, Any]:
    """One message sent: its bytes, and for the localization of a wrong sum what was sent (the values,
    where they sit in the tensor being reduced) and what the tensor held at that moment."""
    sent = [t for t in call.contributed if exact.tensor(t, SENT)]
    facts: dict[str, Any] = {"bytes": sum(exact.nbytes(t) for t in sent)}
    whole = held.get("tensor")
    if whole is not None and len(sent) == 1 and exact.tensor(whole, HELD):
        message = sent[0]
        facts["values"] = message.detach().reshape(-1).clone()
        facts["offset"] = _offset(message, whole)
        facts["held"] = whole.detach().reshape(-1).clone()
    return facts


def _backend_call(built_in: list[dict[str, Any]], name: str) -> Callable[..., dict[str, Any]]:
    """The describe of Backend.<name>: the call joins the built-in collectives, in the order they ran."""

    def describe(*args: Any, **kwargs: Any) -> dict[str, Any]:
        built_in.append({"op": f"Backend.{name}", "kind": kind_of(name)})
        return {}

    return describe


def ring(ctx: RankContext, shapes: list[list[int]], seed: int) -> dict[str, Any]:
    """For each shape: the tensor after the student's call (its input is the judge's to know), the
    bytes and the number of messages sent, and each message's values, offset in the tensor and the
    tensor's values when it was sent (the steps of the ring, for localizing a wrong sum); and every
    built-in collective the rank ran, from the student's import on."""
    ctx.init_group()
    held: dict[str, torch.Tensor] = {}
    sent: list[dict[str, Any]] = []
    built_in: list[dict[str, Any]] = []

    def seen(call: Collective) -> None:
        if call.kind == "send":
            sent.append(_sent(call, held))
        elif not call.point_to_point:
            built_in.append({"op": call.op, "kind": call.kind})

    ctx.facts["collectives"] = built_in
    for name in BACKEND_COLLECTIVES:
        if hasattr(Backend, name):
            ctx.spy(Backend, name, _backend_call(built_in, name))
    with ObservedThreads(seen):
        ring_all_reduce = ctx.student("ring_all_reduce")
        ctx.facts["calls"] = []
        for index, shape in enumerate(shapes):
            tensor = torch.from_numpy(rank_input(seed, index, ctx.rank, shape))
            held["tensor"] = tensor
            call: dict[str, Any] = {"sent_before": len(sent)}
            ctx.facts["calls"].append(call)
            returned = ring_all_reduce(tensor)
            # What the tensor became, as facts the judge can always read: its values only when they are
            # still float32 (a complex or bfloat16 tensor could not even be reported).
            plain = exact.tensor(tensor, HELD)  # the student's code may have given the grader's tensor another class
            call["dtype"] = str(exact.dtype(tensor)).removeprefix("torch.") if plain else type(tensor).__name__
            call["shape"] = exact.shape(tensor) if plain else []
            call["output"] = tensor.detach().clone() if plain and exact.dtype(tensor) == torch.float32 else None
            call["returned_tensor"] = isinstance(returned, torch.Tensor)
            messages = sent[call.pop("sent_before") :]
            call["bytes"] = sum(s["bytes"] for s in messages)
            call["messages"] = len(messages)
            call["sends"] = [{key: s[key] for key in ("values", "offset", "held") if key in s} for s in messages]
    held.clear()
    return {}
