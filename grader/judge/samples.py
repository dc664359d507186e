"""Which samples each rank trained on, against the batches the exercise's data pipeline gives.

Ranks record the dataset rows of every forward pass (grader.rank.training.ForwardRecorder). A
data mistake is named only from its signature in those samples: every rank going through the
whole dataset, batches of another size, partial batches dropped or kept, the first epoch's order
repeated (no set_epoch), epochs counted from 1, an unshuffled sampler, ranks whose shards overlap. Otherwise the message
says which batch differs and what it should have held. This is evidence for a failure the numbers
already show, never a failure by itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grader.judge.names import Cause
from grader.judge.trajectory import Finding

Batches = list[list[int]]


@dataclass(frozen=True)
class Pipeline:
    """What the ranks should have drawn: per rank, every batch in order, and the batches of known
    mistakes (name -> per rank), computed by the trusted reference."""

    size: int
    batch_size: int
    epochs: int
    expected: list[Batches]
    mistakes: dict[str, list[Batches]]
    sampler: str  # how the expected batches are drawn, for messages


_NAMED_ORDERS: dict[Cause, tuple[str, str]] = {
    Cause("no_set_epoch"): (
        "missing set_epoch",
        "every epoch repeats the first epoch's order; call sampler.set_epoch(epoch) at the start of each epoch",
    ),
    Cause("unshuffled"): (
        "DistributedSampler with shuffle=False",
        "the batches come in dataset order; the reference shuffles (shuffle=True, seed=0)",
    ),
    Cause("epochs_from_one"): (
        "set_epoch given epoch + 1",
        "every epoch draws the order of the next one, as with epochs "
        "counted from 1; call sampler.set_epoch(epoch) with epochs counted from 0",
    ),
}


def _trains(call: dict) -> bool:
    return bool(call["grad"] and call["samples"])


def trained_batches(forwards: list[dict]) -> Batches:
    """The samples of each forward pass that could produce gradients (autograd on)."""
    return [call["samples"] for call in forwards if _trains(call)]


def step_batches(facts: Mapping[str, Any]) -> list[Batches]:
    """Per optimizer step, the samples of the gradient-producing forward passes since the step before."""
    forwards, done, per_step = facts["forwards"], 0, []
    for step in facts["steps"]:
        per_step.append([call["samples"] for call in forwards[done : step["forwards"]] if _trains(call)])
        done = step["forwards"]
    return per_step


def eval_mode_passes(forwards: list[dict]) -> tuple[int, int]:
    """(forward passes that trained in eval mode, forward passes that trained)."""
    training = [call for call in forwards if _trains(call)]
    return sum(not call["training"] for call in training), len(training)


def _where(index: int, want: Batches, pipeline: Pipeline) -> str:
    """' (the first of epoch e)' for a batch that starts an epoch after the first; epochs count from 0, as
    `start_epoch(loader, epoch)` and `set_epoch` count them."""
    per_epoch = len(want) // pipeline.epochs if pipeline.epochs else 0
    if per_epoch and index % per_epoch == 0 and index:
        return f" (the first of epoch {index // per_epoch})"
    return ""


def _epoch_sets(batches: Batches, per_epoch: int, epochs: int) -> list[set[int]]:
    return [set(sum(batches[e * per_epoch : (e + 1) * per_epoch], [])) for e in range(epochs)]


def _follows(got: Batches, want: Batches) -> bool:
    """Whether `got` is `want` or its beginning (a loop may stop early; the step count says if that is wrong)."""
    return len(got) <= len(want) and got == want[: len(got)]


def diagnose_samples(observed: list[Batches], pipeline: Pipeline) -> Finding | None:
    """None if every rank drew the expected batches (or their beginning); else what is wrong with the data."""
    ranks = [r for r, (got, want) in enumerate(zip(observed, pipeline.expected)) if not _follows(got, want)]
    if not ranks:
        return None
    rank = ranks[0]
    got, want = observed[rank], pipeline.expected[rank]
    b = pipeline.batch_size
    drawn, shard = sum(map(len, got)), sum(map(len, want))
    if drawn >= pipeline.size * pipeline.epochs > shard:
        return Finding(
            Cause("no_sampler"),
            f"no DistributedSampler: rank {rank} trained on {drawn} samples in "
            f"{pipeline.epochs} epoch(s), all {pipeline.size} every epoch, instead of its shard of "
            f"{shard // pipeline.epochs}",
        )
    if got and len(got[0]) != len(want[0]) and len(got[0]) != 0:
        return Finding(
            Cause("batch_size"),
            f"batches of {len(got[0])} samples on rank {rank}, instead of batch_size = {b} "
            "(the batch size is per rank)",
        )
    full = [batch for batch in want if len(batch) == b]
    if got == full and full != want:
        partial = next(len(batch) for batch in want if len(batch) != b)
        return Finding(
            Cause("dropped_partial_batch"),
            f"the last, partial batch of each epoch was dropped on rank {rank} "
            f"(a batch of {partial} samples; drop_last=True?): the reference trains on every sample",
        )
    short = next((batch for batch in got if len(batch) < b), None)
    if short is not None and all(len(batch) == b for batch in want):
        return Finding(
            Cause("partial_batch_used"),
            f"rank {rank} trained on a partial batch of {len(short)} samples; "
            "every micro-batch must hold batch_size samples (DataLoader(..., drop_last=True))",
        )
    for name, batches in pipeline.mistakes.items():
        cause = Cause(name)  # the reference's name for another order of the samples (the exercise's workers)
        if got and cause in _NAMED_ORDERS and all(_follows(g, m) for g, m in zip(observed, batches)):
            headline, why = _NAMED_ORDERS[cause]
            first = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
            return Finding(
                cause,
                f"{headline}: rank {rank}'s batch {first + 1}{_where(first, want, pipeline)} held "
                f"samples {got[first][:6]}..., {pipeline.sampler} gives {want[first][:6]}...; {why}",
            )
    per_epoch = len(want) // pipeline.epochs if pipeline.epochs else len(want)
    sets = [_epoch_sets(batches, per_epoch, 1)[0] for batches in observed]
    for other in range(len(observed)):
        for mine in range(other + 1, len(observed)):
            shared = sets[other] & sets[mine]
            if shared:
                return Finding(
                    Cause("shards_overlap"),
                    f"the ranks' shards overlap: ranks {other} and {mine} both trained on "
                    f"{len(shared)} of the same samples in the first epoch; DistributedSampler splits one "
                    "permutation, the same on every rank (same seed), into disjoint shards",
                )
    first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    if first >= min(len(got), len(want)):
        return Finding("measured", f"rank {rank} trained on {len(got)} batches, {pipeline.sampler} gives {len(want)}")
    return Finding(
        "measured",
        f"rank {rank}'s batch {first + 1} held samples {got[first][:6]}..., {pipeline.sampler} "
        f"gives {want[first][:6]}...",
    )
