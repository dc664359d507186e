"""Judging exercise 8: the sum, the bytes on the wire, no built-in collective, and deadlocks named
as such (every rank stuck in a blocking send)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from grader.checks.api import CheckContext, check
from grader.checks.diagnose import where
from grader.engine import RankOutcome

SHAPES = [[1003], [7, 13]]  # sizes that are not multiples of 2, 3 or 4
SEED = 11
DEADLINE = 5.0  # a correct ring on these sizes takes well under a second; a deadlock waits this long
FLOAT_BYTES = 4


def _timed_out(outcome: RankOutcome) -> bool:
    return "for send operation" in (outcome.error or {}).get("message", "") or outcome.stopped == "deadline"


def _ranks(ctx: CheckContext) -> list[dict[str, Any]]:
    """Each rank's facts, under a short deadline; a deadlock in send is named here."""
    job = dataclasses.replace(ctx.job("ring", shapes=SHAPES, seed=SEED), deadline=min(ctx.deadline, DEADLINE))
    result = ctx.runs.run(job)
    failing = [r for r in result.ranks if not r.ok]
    if failing and not any((r.error or {}).get("not_implemented") for r in failing):
        places = {r.rank: where(r, ctx.student_file) for r in failing}
        stuck = [r for r in failing if _timed_out(r)]
        # The first rank to time out closes its connections: the others then fail in send too.
        if stuck and len(failing) == ctx.world_size and all("send" in place for place in places.values()):
            raise ctx.fail(f"deadlock: every rank is stuck in send, at {places[stuck[0].rank]}. dist.send blocks "
                           "until the neighbour receives, and the neighbour is itself sending; start the send "
                           "with dist.isend, then recv, then wait()", hint=3)
    return ctx.require(result)


def _calls(ctx: CheckContext) -> list[list[dict[str, Any]]]:
    """Per rank, per shape: input, output, bytes sent."""
    return [facts["calls"] for facts in _ranks(ctx)]


def _bounds(size: int, world: int) -> list[tuple[int, int]]:
    """Where tensor_split puts the W chunks of a tensor of `size` elements."""
    edges = np.cumsum([0] + [len(part) for part in np.array_split(np.arange(size), world)])
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


@check("sums_correctly")
def sums_correctly(ctx: CheckContext) -> None:
    calls = _calls(ctx)
    for index, shape in enumerate(SHAPES):
        expected = sum(np.asarray(rank_calls[index]["input"], dtype=np.float64) for rank_calls in calls)
        for rank, rank_calls in enumerate(calls):
            call = rank_calls[index]
            output = np.asarray(call["output"])
            if list(output.shape) != shape:
                raise ctx.fail(f"the tensor changed shape: {list(output.shape)} instead of {shape}")
            wrong = np.flatnonzero(~np.isclose(output, expected, rtol=1e-5, atol=1e-5))
            if wrong.size == 0:
                continue
            if np.allclose(output, call["input"]):
                returned = " (the function returned a new tensor: the sum must be written into `tensor`)" \
                    if call["returned_tensor"] else ""
                raise ctx.fail(f"rank {rank}'s tensor of shape {shape} was left unchanged{returned}", hint=1)
            size = int(np.prod(shape))
            owners = sorted({i for i, (lo, hi) in enumerate(_bounds(size, ctx.world_size)) if
                             np.any((wrong >= lo) & (wrong < hi))})
            tail = size - size % ctx.world_size
            if size % ctx.world_size and wrong.min() >= tail:
                raise ctx.fail(f"wrong chunk bounds: on rank {rank}, only the last {size - tail} of {size} elements "
                               f"(the remainder of {size} / W={ctx.world_size}) are wrong; the chunks must cover "
                               "the whole tensor (tensor_split)", hint=2)
            first, got, want = wrong[0], output.reshape(-1)[wrong[0]], expected.reshape(-1)[wrong[0]]
            raise ctx.fail(f"rank {rank}: {wrong.size} of {size} elements of the shape-{shape} tensor differ from the "
                           f"sum of all ranks' tensors (first at flat index {first}, {got:.5g} instead of {want:.5g}), "
                           f"in chunks {owners} of "
                           f"{ctx.world_size}: check the chunk bounds and which chunk each step sends and receives",
                           hint=2)


@check("ring_traffic")
def ring_traffic(ctx: CheckContext) -> None:
    calls = _calls(ctx)
    world = ctx.world_size
    for index, shape in enumerate(SHAPES):
        size = int(np.prod(shape))
        message = size * FLOAT_BYTES
        low = 2 * (world - 1) * (size // world) * FLOAT_BYTES
        high = 2 * (world - 1) * -(-size // world) * FLOAT_BYTES
        for rank, rank_calls in enumerate(calls):
            sent = rank_calls[index]["bytes"]
            if low <= sent <= high:
                continue
            ratio = sent / message
            if world > 2 and abs(ratio - (world - 1)) < 0.05:
                raise ctx.fail(f"naive all-to-all: rank {rank} sent {sent} bytes = (W-1) x M for a {message}-byte "
                               f"tensor; the ring sends 2(W-1)/W x M = {2 * (world - 1) / world * message:.0f}", hint=4)
            raise ctx.fail(f"rank {rank} sent {sent} bytes ({ratio:.3g} x M) for a {message}-byte tensor; a ring "
                           f"all-reduce sends 2(W-1)/W x M, between {low} and {high} bytes with W={world}", hint=4)


@check("point_to_point_only")
def point_to_point_only(ctx: CheckContext) -> None:
    for rank, facts in enumerate(_ranks(ctx)):
        used = sorted(name for name, calls in facts["collectives"].items() if calls)
        if used:
            raise ctx.fail(f"rank {rank} called the built-in collective ProcessGroup.{used[0]} (dist.all_reduce, "
                           "all_gather, reduce_scatter, broadcast... are not allowed): build the ring from send "
                           "and recv", hint=5)
