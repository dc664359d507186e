"""Judging exercise 8: the sum, the bytes on the wire, no built-in collective, and hangs and crashes
named from where the ranks were (every rank in a blocking send, every rank in recv, a gloo abort).
A wrong sum is described by what its elements hold (mixtures.py), whatever the chunking."""

from __future__ import annotations

import dataclasses
import re
import signal
from typing import Any

import numpy as np

from grader.checks.ex08_ring_allreduce.facts import RING, Call, Message, Ring
from grader.checks.ex08_ring_allreduce.inputs import rank_input
from grader.checks.ex08_ring_allreduce.mixtures import explain
from grader.engine import RankOutcome
from grader.judge.api import CheckContext, CheckFailed, check
from grader.judge.diagnose import where
from grader.judge.explain import error_messages
from grader.judge.names import HintName
from grader.judge.tolerance import close
from grader.judge.wording import article

SHAPES = [[1003], [7, 13]]  # sizes that are not multiples of 2, 3 or 4
DEADLINE = 5.0  # a correct ring on these sizes takes well under a second; a deadlock waits this long
FLOAT_BYTES = 4
GLOO_SIZES = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)")  # gloo: message, buffer bytes
SIZE_MISMATCH = re.compile(r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)")


def _timed_out(outcome: RankOutcome, operation: str) -> bool:
    """Whether the rank gave up waiting in `operation` ("send" or "recv"), or hung to the deadline."""
    message = error_messages(outcome.error)
    return f"for {operation} operation" in message or outcome.stopped == "deadline"


def _hang_or_crash(ctx: CheckContext, failing: list[RankOutcome]) -> None:
    """Name the failures the ring's own mistakes cause, from where each rank was."""
    places = {r.rank: where(r, ctx.student_file) for r in failing}
    aborted = [r for r in failing if r.status == -signal.SIGABRT]
    sizes = {r.rank: GLOO_SIZES.search(r.output) for r in aborted}
    received = "; ".join(
        f"rank {rank} aborted inside gloo: a message of {int(m[1]) // FLOAT_BYTES} floats ({m[1]} bytes) arrived "
        f"into a receive buffer of {int(m[2]) // FLOAT_BYTES} ({m[2]} bytes)"
        for rank, m in sizes.items()
        if m
    )
    for outcome in failing:
        mismatch = SIZE_MISMATCH.search((outcome.error or {}).get("message", ""))
        if mismatch and places[outcome.rank]:
            raise ctx.fail(
                f"tensors of different sizes: rank {outcome.rank} raised at {places[outcome.rank]}: {mismatch[0]}"
                f"{'; ' + received if received else ''}. A received chunk and the chunk it goes into must have "
                "the same size: allocate each receive buffer like the chunk that arrives in it (chunks of a "
                "tensor_split differ in size when W does not divide the tensor)"
            )
    if aborted:
        rank = aborted[0].rank
        raise ctx.fail(
            f"rank {rank} aborted inside gloo (SIGABRT) at {places[rank] or 'a point-to-point call'}: a "
            "message arrived into a receive buffer of another size"
            f"{' (' + received + ')' if received else ''}, so the chunk a rank sends is not the "
            "chunk its neighbour receives at that step",
            hint=HintName("chunk_bounds"),
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
                f"deadlock: every rank waits in {operation}, at {places[stuck[0].rank]}. {why}",
                hint=HintName("isend_not_send"),
            )


def _ranks(ctx: CheckContext) -> list[Ring]:
    """Each rank's facts, under a short deadline; deadlocks and gloo aborts are named here."""
    job = dataclasses.replace(ctx.job(RING.name, shapes=SHAPES, seed=_seed(ctx)), deadline=min(ctx.deadline, DEADLINE))
    result = ctx.runs.run(job, (ctx.check, ctx.world_size))
    ctx.used.append(result)  # what the run found (a refused object, the grader's code replaced) reaches the verdict
    failing = [r for r in result.ranks if not r.ok]
    if failing and not any((r.error or {}).get("not_implemented") for r in failing):
        _hang_or_crash(ctx, failing)
    return ctx.require(result, schema=Ring)


def _seed(ctx: CheckContext) -> int:
    """The seed of the tensors, drawn per grading: sums recorded from another grading are wrong."""
    return ctx.draw("tensors").randrange(2**31)


def _calls(ctx: CheckContext) -> list[list[Call]]:
    """Per rank, per shape: output, bytes sent."""
    return [facts["calls"] for facts in _ranks(ctx)]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _wrong_sum(
    ctx: CheckContext,
    rank: int,
    shape: list[int],
    output: np.ndarray,
    inputs: np.ndarray,
    messages: int,
    sends: list[list[Message]],
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
                hint=HintName("in_place"),
            )
        if factor == 0:
            return ctx.fail(f"{whole} holds zeros: nothing of the ranks' inputs reached it", hint=HintName("in_place"))
        return ctx.fail(f"{whole} is {factor:g} times the sum of the ranks' tensors", hint=HintName("in_place"))
    tail = size - size % world
    wrong = [run for run in runs if run.mixture != sum_]
    own = tuple(float(r == rank) for r in range(world))
    if size % world and wrong == [r for r in runs if r.start >= tail] and all(r.mixture == own for r in wrong):
        return ctx.fail(
            f"wrong chunk bounds: on rank {rank}, only the last {size - tail} of {size} elements "
            f"(the remainder of {size} / W={world}) are wrong: they still hold this rank's own input, "
            "so no chunk covered them; the chunks must cover the whole tensor (tensor_split)",
            hint=HintName("chunk_bounds"),
        )
    if all(run.mixture is not None and sorted(run.mixture) == [0.0] * (world - 1) + [1.0] for run in runs):
        step = _first_wrong_message(inputs, sends)
        return ctx.fail(
            f"nothing was added up: every element of {whole} holds a single rank's input ("
            f"{'; '.join(run.describe(rank) for run in runs[:3])}). "
            + (
                step
                or "The grader cannot place the messages in a ring's steps (copies rather than views of the tensor, "
                "or not 2(W-1) messages per rank), so no step is named"
            ),
            hint=HintName("chunk_bounds"),
        )
    if all(run.mixture is not None and min(run.mixture) >= 1.0 for run in wrong):
        return ctx.fail(
            f"inputs counted more than once: {'; '.join(run.describe(rank) for run in wrong[:3])} in "
            f"{whole}: a received chunk was added where it should replace one (the reduce-scatter adds, "
            "the all-gather copies the complete chunks)",
            hint=HintName("chunk_bounds"),
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
            hint=HintName("chunk_bounds"),
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
        hint=HintName("chunk_bounds"),
    )


def _expected(step: int, world: int) -> tuple[str, Any]:
    """What a ring's message at `step` (0-based, over both phases) holds: the phase, and a test of a
    mixture (reduce-scatter step s: a partial sum of s + 1 ranks' inputs, the sender's among them;
    all-gather: the complete sum)."""
    if step < world - 1:
        return (
            f"reduce-scatter step {step + 1}",
            lambda m, sender: m is not None and set(m) <= {0.0, 1.0} and sum(m) == step + 1 and m[sender] == 1.0,
        )
    return f"all-gather step {step - world + 2}", lambda m, _sender: m == (1.0,) * world


def _first_wrong_message(inputs: np.ndarray, sends: list[list[Message]]) -> str:
    """The first message (by step, then rank) whose values are not what a ring sends at that step,
    measured from the values each rank sent and where they sit in its tensor; "" when the messages
    cannot be placed in the tensor (copies, not views) or every message is a ring's."""
    world = inputs.shape[0]
    if any(len(mine) != 2 * (world - 1) for mine in sends):
        return ""  # not a ring's count of messages: the k-th message is no step of a ring
    if any(m.get("offset") is None or "values" not in m for mine in sends for m in mine):
        return ""
    for step in range(min(len(mine) for mine in sends)):
        phase, right = _expected(step, world)
        for sender, mine in enumerate(sends):
            message = mine[step]
            start = message.get("offset")
            if start is None:  # placed by the guard above: narrows the type
                return ""
            values = np.asarray(message["values"], dtype=np.float64)
            stop = start + values.size
            runs = [r for r in explain(values, inputs[:, start:stop]) if not right(r.mixture, sender)]
            if not runs:
                continue
            shifted = [dataclasses.replace(r, start=r.start + start, stop=r.stop + start) for r in runs]
            what = "; ".join(r.describe(sender) for r in shifted[:2])
            should = (
                "the complete sum"
                if step >= world - 1
                else "its own input"
                if step == 0
                else f"a partial sum of {step + 1} ranks' inputs, its own among them"
            )
            text = (
                f"The first message that is not a ring's: at {phase} rank {sender} sent elements {start}-{stop - 1}: "
                f"{what}, where a ring sends {should}"
            )
            return text + _held_then(inputs, message, sender, step >= world - 1)
    return ""


def _held_then(inputs: np.ndarray, message: Message, sender: int, gathering: bool) -> str:
    """What the sender's tensor held when it sent a wrong all-gather message: whether a complete chunk
    was there to send (then the wrong one was sent) or none (the reduce-scatter completed none)."""
    if not gathering or "held" not in message:
        return ""
    held = np.asarray(message["held"], dtype=np.float64)
    complete = [r for r in explain(held, inputs) if r.mixture == (1.0,) * inputs.shape[0]]
    if complete:
        return (
            f". At that moment elements {complete[0].start}-{complete[0].stop - 1} of its tensor already held "
            "the complete sum: the all-gather sent another chunk than the one the reduce-scatter completed"
        )
    return (
        ". At that moment no element of its tensor held the complete sum: the reduce-scatter had completed "
        "no chunk on this rank"
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
                    hint=HintName("in_place"),
                )
            if call["dtype"] != "float32":
                raise ctx.fail(
                    f"ring_all_reduce left a tensor of dtype {call['dtype']} on rank {rank}, expected float32 (the "
                    "input's): the sum must be written into `tensor` itself",
                    hint=HintName("in_place"),
                )
            output = np.asarray(call["output"]).reshape(-1).astype(np.float64)
            if close(output, expected, rtol=1e-5, atol=1e-5):
                continue
            odd = int(np.count_nonzero(~np.isfinite(output)))
            if odd:
                raise ctx.fail(
                    f"{odd} of {output.size} elements of rank {rank}'s tensor of shape {shape} are NaN or infinite "
                    "after ring_all_reduce; the sum of these inputs is finite everywhere"
                )
            if close(output, inputs[rank], rtol=1e-5, atol=1e-8):  # numpy's defaults
                returned = (
                    " (the function returned a new tensor: the sum must be written into `tensor`)"
                    if call["returned_tensor"]
                    else ""
                )
                raise ctx.fail(
                    f"rank {rank}'s tensor of shape {shape} was left unchanged{returned}", hint=HintName("in_place")
                )
            sends = [rank_calls[index].get("sends") or [] for rank_calls in calls]
            raise _wrong_sum(ctx, rank, shape, output, inputs, call["messages"], sends)


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
                _traffic(rank, sent, rank_calls[index]["messages"], message, world, (low, high)),
                hint=HintName("right_neighbour"),
            )


def _traffic(rank: int, sent: int, messages: int, message: int, world: int, ring: tuple[int, int]) -> str:
    """What one rank's traffic was, named when it is a whole number of whole tensors or the message
    count says which steps are extra or missing."""
    ratio, steps = sent / message, 2 * (world - 1)
    sending = (
        f"rank {rank} sent {sent} bytes ({ratio:.3g} x M) in {_count(messages, 'message')} for "
        f"{article(str(message))}-byte tensor"
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
        if facts["collectives"]:
            first = facts["collectives"][0]
            raise ctx.fail(
                f"rank {rank} ran a built-in collective, {first['kind'].replace('_', '-')} ({first['op']}, "
                "counted by the grader); built-in collectives (dist.all_reduce, all_gather, "
                "reduce_scatter, broadcast..., the process group's own methods and the functional "
                "collectives) are not allowed: build the ring from send and recv",
                hint=HintName("no_collectives"),
            )
    for rank, facts in enumerate(_ranks(ctx)):
        silent = next((call for call in facts["calls"] if call["messages"] == 0), None)
        if silent is not None:  # no message, no ring: a function that does nothing uses no collective either
            raise ctx.fail(
                f"rank {rank} sent no message while reducing a tensor of shape {silent['shape']}: a ring "
                "all-reduce sends 2(W-1) messages per rank, with send/recv (or isend/irecv)",
                hint=HintName("no_collectives"),
            )
