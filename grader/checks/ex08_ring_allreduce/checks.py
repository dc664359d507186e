"""Judging exercise 8: the sum, the bytes on the wire, no built-in collective, and hangs and crashes
named from where the ranks were (every rank in a blocking send, every rank in recv, a gloo abort).
A wrong sum is described by what its elements hold (mixtures.py), whatever the chunking."""

from __future__ import annotations

import dataclasses
import signal
from typing import Any

import numpy as np

from grader.checks.ex08_ring_allreduce.inputs import rank_input
from grader.checks.ex08_ring_allreduce.mixtures import explain
from grader.engine import RankOutcome
from grader.judge.api import CheckContext, CheckFailed, check
from grader.judge.diagnose import where
from grader.judge.explain import error_messages

SHAPES = [[1003], [7, 13]]  # sizes that are not multiples of 2, 3 or 4
DEADLINE = 5.0  # a correct ring on these sizes takes well under a second; a deadlock waits this long
FLOAT_BYTES = 4


def _timed_out(outcome: RankOutcome, operation: str) -> bool:
    """Whether the rank gave up waiting in `operation` ("send" or "recv"), or hung to the deadline."""
    message = error_messages(outcome.error)
    return f"for {operation} operation" in message or outcome.stopped == "deadline"


def _hang_or_crash(ctx: CheckContext, failing: list[RankOutcome]) -> None:
    """Name the failures the ring's own mistakes cause, from where each rank was."""
    places = {r.rank: where(r, ctx.student_file) for r in failing}
    aborted = [r for r in failing if r.status == -signal.SIGABRT]
    if aborted:
        rank = aborted[0].rank
        raise ctx.fail(
            f"rank {rank} aborted inside gloo (SIGABRT) at {places[rank] or 'a point-to-point call'}: a "
            "message arrived into a receive buffer of another size, so the chunk a rank sends is not the "
            "chunk its neighbour receives at that step",
            hint="chunk_bounds",
        )
    if len(failing) < ctx.world_size:
        return
    # The first rank to time out closes its connections: the others then fail where they were.
    for operation, why in (
        (
            "send",
            "dist.send blocks until the neighbour receives, and the neighbour is itself "
            "sending; start the send with dist.isend, then recv, then wait()",
        ),
        (
            "recv",
            "no rank sends the message it waits for: the sends and receives do not pair up "
            "(each rank must receive from the rank that sends to it: left = (rank - 1) % W "
            "when right = (rank + 1) % W), or there are more receives than sends",
        ),
    ):
        stuck = [r for r in failing if _timed_out(r, operation)]
        if stuck and all(operation in place for place in places.values()):
            raise ctx.fail(
                f"deadlock: every rank waits in {operation}, at {places[stuck[0].rank]}. {why}", hint="isend_not_send"
            )


def _ranks(ctx: CheckContext) -> list[dict[str, Any]]:
    """Each rank's facts, under a short deadline; deadlocks and gloo aborts are named here."""
    job = dataclasses.replace(ctx.job("ring", shapes=SHAPES, seed=_seed(ctx)), deadline=min(ctx.deadline, DEADLINE))
    result = ctx.runs.run(job)
    failing = [r for r in result.ranks if not r.ok]
    if failing and not any((r.error or {}).get("not_implemented") for r in failing):
        _hang_or_crash(ctx, failing)
    return ctx.require(result)


def _seed(ctx: CheckContext) -> int:
    """The seed of the tensors, drawn per grading: sums recorded from another grading are wrong."""
    return ctx.draw("tensors").randrange(2**31)


def _calls(ctx: CheckContext) -> list[list[dict[str, Any]]]:
    """Per rank, per shape: output, bytes sent."""
    return [facts["calls"] for facts in _ranks(ctx)]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _wrong_sum(
    ctx: CheckContext, rank: int, shape: list[int], output: np.ndarray, inputs: np.ndarray, messages: int
) -> CheckFailed:
    """What is wrong with one rank's result, named from what its elements hold: the failure to raise."""
    world = ctx.world_size
    size = output.size
    runs = explain(output, inputs)
    sum_ = (1.0,) * world
    mixtures = {run.mixture for run in runs}
    whole = f"rank {rank}'s tensor of shape {shape}"
    # One mixture shared by every run: runs[0]'s, so it is None exactly when the set holds None.
    if len(mixtures) == 1 and (mixture := runs[0].mixture) is not None and len(set(mixture)) == 1:
        factor = mixture[0]
        if abs(factor * world - 1) < 1e-9:
            return ctx.fail(
                f"{whole} is averaged: it holds exactly 1/W of the sum (the mean); all_reduce sums (SUM is its "
                "default op): do not divide by W",
                hint="in_place",
            )
        if factor == 0:
            return ctx.fail(f"{whole} holds zeros: nothing of the ranks' inputs reached it", hint="in_place")
        return ctx.fail(f"{whole} is {factor:g} times the sum of the ranks' tensors", hint="in_place")
    tail = size - size % world
    wrong = [run for run in runs if run.mixture != sum_]
    own = tuple(float(r == rank) for r in range(world))
    if size % world and wrong == [r for r in runs if r.start >= tail] and all(r.mixture == own for r in wrong):
        return ctx.fail(
            f"wrong chunk bounds: on rank {rank}, only the last {size - tail} of {size} elements "
            f"(the remainder of {size} / W={world}) are wrong: they still hold this rank's own input, "
            "so no chunk covered them; the chunks must cover the whole tensor (tensor_split)",
            hint="chunk_bounds",
        )
    if all(run.mixture is not None and sorted(run.mixture) == [0.0] * (world - 1) + [1.0] for run in runs):
        return ctx.fail(
            f"nothing was added up: every element of {whole} holds a single rank's input ("
            f"{'; '.join(run.describe(rank) for run in runs[:3])}), so no chunk that went around the "
            "ring carried a sum: either the reduce-scatter overwrites the chunks it receives instead of "
            "adding them (+=), or the all-gather passes on chunks the reduce-scatter had not completed",
            hint="chunk_bounds",
        )
    if all(run.mixture is not None and min(run.mixture) >= 1.0 for run in wrong):
        return ctx.fail(
            f"inputs counted more than once: {'; '.join(run.describe(rank) for run in wrong[:3])} in "
            f"{whole}: a received chunk was added where it should replace one (the reduce-scatter adds, "
            "the all-gather copies the complete chunks)",
            hint="chunk_bounds",
        )
    complete = [run for run in runs if run.mixture == sum_]
    partial = all(run.mixture is not None and set(run.mixture) <= {0.0, 1.0} for run in wrong)
    if len(complete) == 1 and partial and messages <= world - 1:
        run = complete[0]
        return ctx.fail(
            f"only the reduce-scatter ran: {whole} holds the complete sum in elements "
            f"{run.start}-{run.stop - 1} (one chunk) and partial sums elsewhere, after "
            f"{_count(messages, 'message')}; the all-gather phase (W-1 more steps passing the complete "
            "chunks around the ring) is missing",
            hint="chunk_bounds",
        )
    steps = (
        ""
        if messages == 2 * (world - 1)
        else (f"; it sent {_count(messages, 'message')} where a ring sends 2(W-1) = {2 * (world - 1)}")
    )
    shown = "; ".join(run.describe(rank) for run in wrong[:3]) + ("; ..." if len(wrong) > 3 else "")
    count = sum(run.stop - run.start for run in wrong)
    return ctx.fail(
        f"{count} of {size} elements of {whole} are not the sum of all ranks' tensors: {shown}{steps}",
        hint="chunk_bounds",
    )


@check("sums_correctly")
def sums_correctly(ctx: CheckContext) -> None:
    calls = _calls(ctx)
    for index, shape in enumerate(SHAPES):
        inputs = np.stack(
            [
                rank_input(_seed(ctx), index, rank, shape).astype(np.float64).reshape(-1)
                for rank in range(ctx.world_size)
            ]
        )
        expected = inputs.sum(axis=0)
        for rank, rank_calls in enumerate(calls):
            call = rank_calls[index]
            if call["shape"] != shape:
                raise ctx.fail(
                    f"ring_all_reduce left a tensor of shape {call['shape']} on rank {rank}, expected {shape} (the "
                    "input's): the sum must be written into `tensor` itself",
                    hint="in_place",
                )
            if call["dtype"] != "float32":
                raise ctx.fail(
                    f"ring_all_reduce left a tensor of dtype {call['dtype']} on rank {rank}, expected float32 (the "
                    "input's): the sum must be written into `tensor` itself",
                    hint="in_place",
                )
            output = np.asarray(call["output"]).reshape(-1).astype(np.float64)
            if np.allclose(output, expected, rtol=1e-5, atol=1e-5):
                continue
            odd = int(np.count_nonzero(~np.isfinite(output)))
            if odd:
                raise ctx.fail(
                    f"{odd} of {output.size} elements of rank {rank}'s tensor of shape {shape} are NaN or infinite "
                    "after ring_all_reduce; the sum of these inputs is finite everywhere"
                )
            if np.allclose(output, inputs[rank]):
                returned = (
                    " (the function returned a new tensor: the sum must be written into `tensor`)"
                    if call["returned_tensor"]
                    else ""
                )
                raise ctx.fail(f"rank {rank}'s tensor of shape {shape} was left unchanged{returned}", hint="in_place")
            raise _wrong_sum(ctx, rank, shape, output, inputs, call["messages"])


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
            raise ctx.fail(
                _traffic(rank, sent, rank_calls[index]["messages"], message, world, (low, high)), hint="right_neighbour"
            )


def _traffic(rank: int, sent: int, messages: int, message: int, world: int, ring: tuple[int, int]) -> str:
    """What one rank's traffic was, named when it is a whole number of whole tensors or the message
    count says which steps are extra or missing."""
    ratio, steps = sent / message, 2 * (world - 1)
    sending = (
        f"rank {rank} sent {sent} bytes ({ratio:.3g} x M) in {_count(messages, 'message')} for a {message}-byte tensor"
    )
    ring_sends = (
        f"a ring sends 2(W-1) = {steps} messages of about M/W, 2(W-1)/W x M in all: between {ring[0]} and "
        f"{ring[1]} bytes with W={world}"
    )
    if sent == 0:
        return f"rank {rank} sent no point-to-point message at all; {ring_sends}"
    if world > 2 and abs(ratio - (world - 1)) < 0.05:
        return (
            f"whole tensors sent: {sending} = (W-1) x M, the whole tensor W-1 times (a naive all-to-all, or "
            f"whole tensors passed around the ring); {ring_sends}"
        )
    if abs(ratio - steps) < 0.05:
        return f"whole tensors sent: {sending} = 2(W-1) x M, the whole tensor at every step; {ring_sends}"
    if messages != steps:
        extra = messages - steps
        return f"{sending}: {_count(abs(extra), 'step')} {'too many' if extra > 0 else 'missing'}; {ring_sends}"
    return f"{sending}; {ring_sends}"


@check("point_to_point_only")
def point_to_point_only(ctx: CheckContext) -> None:
    for rank, facts in enumerate(_ranks(ctx)):
        used = sorted(name for name, calls in facts["collectives"].items() if calls)
        if used:
            raise ctx.fail(
                f"rank {rank} called the built-in collective ProcessGroup.{used[0]} (dist.all_reduce, "
                "all_gather, reduce_scatter, broadcast... are not allowed): build the ring from send "
                "and recv",
                hint="no_collectives",
            )
