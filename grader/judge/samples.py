"""Which samples each rank trained on, against the batches the exercise's data pipeline gives.

Ranks record the dataset rows of every forward pass (grader.rank.training.ForwardRecorder). A
data mistake is named only where a structural replay reproduces every rank's samples: the batches the
trusted reference draws for it (the first epoch's order repeated, epochs counted from 1, an unshuffled
sampler, a partial batch dropped or kept), the whole dataset every epoch, or the right samples cut into
batches of another size. Otherwise the message says what was measured: which batch differs and what it
should have held, or which ranks' shards overlap. This is evidence for a failure the numbers
already show, never a failure by itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven, structural
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
    drop_last: bool = False  # whether the loader drops each epoch's partial batch
    hint: HintName | None = None  # the exercise's hint on data, for every finding here


_NAMED_ORDERS: dict[Cause, tuple[str, str]] = {
    Cause("no_set_epoch"): (
        "missing set_epoch",
        "every epoch repeats the first epoch's order; call sampler.set_epoch(epoch) at the start of each epoch",
    ),
    Cause("unshuffled"): (
        "DistributedSampler with shuffle=False",
        "the batches come in dataset order; the reference shuffles (shuffle=True, seed=0)",
    ),
    Cause("dropped_partial_batch"): (
        "the partial batch dropped",
        "the last, partial batch of each epoch was dropped (drop_last=True?): the reference trains on every sample",
    ),
    Cause("partial_batch_used"): (
        "a partial batch kept",
        "every micro-batch must hold batch_size samples (DataLoader(..., drop_last=True))",
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


def _named_order(observed: list[Batches], pipeline: Pipeline, rank: int) -> Finding | None:
    """A mistake whose batches the trusted reference drew (another order, a partial batch dropped or kept), proven
    when every rank's batches are exactly its batches (or their beginning: a loop may stop early)."""
    got, want = observed[rank], pipeline.expected[rank]
    for name, batches in pipeline.mistakes.items():
        cause = Cause(name)  # the reference's name for another order of the samples (the exercise's workers)
        if cause not in _NAMED_ORDERS or not got:
            continue
        proven = structural(
            cause,
            {f"rank {r}'s batches": mistaken[: len(g)] for r, (g, mistaken) in enumerate(zip(observed, batches))},
            {f"rank {r}'s batches": g for r, g in enumerate(observed)},
        )
        if proven is not None:
            headline, why = _NAMED_ORDERS[cause]
            first = next(i for i, (g, w) in enumerate(zip(got + [[]], want + [[]])) if g != w)
            held = f"held samples {got[first][:6]}..." if first < len(got) else "was never drawn"
            gives = f"gives {want[first][:6]}..." if first < len(want) else "gives no such batch"
            return Finding(
                f"{headline}: rank {rank}'s batch {first + 1}{_where(first, want, pipeline)} {held}, "
                f"{pipeline.sampler} {gives}{_sizes(got, want, pipeline.batch_size)}; {why}",
                hint=pipeline.hint,
                proven=proven,
            )
    return None


def _sizes(got: Batches, want: Batches, b: int) -> str:
    """The partial batches that one side has and the other lacks, measured: what a dropped or kept one was."""
    mine, wanted = {len(x) for x in got if len(x) < b}, {len(x) for x in want if len(x) < b}
    said = []
    if kept := sorted(mine - wanted):
        said.append(f"trained on a partial batch of {kept[0]} samples")
    if lost := sorted(wanted - mine):
        said.append(f"never trained on the partial batch of {lost[0]} samples")
    return f" (it {' and '.join(said)})" if said else ""


def _epochs(batches: Batches, per_epoch: int) -> list[Batches]:
    return [batches[i : i + per_epoch] for i in range(0, len(batches), per_epoch)]


def _no_sampler(observed: list[Batches], pipeline: Pipeline) -> Proven | None:
    """Every rank loading the whole dataset: each of its epochs holds every sample once (all but the partial
    batch's with drop_last), in batches of batch_size, for as many epochs as the reference."""
    size, b = pipeline.size, pipeline.batch_size
    drawn = size - size % b if pipeline.drop_last else size
    sizes = [b] * (size // b) + ([size % b] if size % b and not pipeline.drop_last else [])

    def shape(batches: Batches) -> list[tuple[list[int], int]]:
        return [([len(x) for x in epoch], len({i for x in epoch for i in x})) for epoch in _epochs(batches, len(sizes))]

    return structural(
        Cause("no_sampler"),
        {
            f"rank {r}'s epochs (batch sizes, distinct samples)": [(sizes, drawn)] * pipeline.epochs
            for r in range(len(observed))
        },
        {f"rank {r}'s epochs (batch sizes, distinct samples)": shape(got) for r, got in enumerate(observed)},
    )


def _batch_size(observed: list[Batches], pipeline: Pipeline, size: int) -> Proven | None:
    """Batches of `size` samples from the right sampler: the first epoch's samples of every rank, in the
    reference's order, cut into batches of `size` (the complete ones: what follows them depends on drop_last)."""
    per_epoch = len(pipeline.expected[0]) // pipeline.epochs if pipeline.epochs else len(pipeline.expected[0])
    built, seen = {}, {}
    for r, (got, want) in enumerate(zip(observed, pipeline.expected)):
        stream = [i for batch in want[:per_epoch] for i in batch]
        cut = [stream[i : i + size] for i in range(0, len(stream) - size + 1, size)]
        built[f"rank {r}'s first-epoch batches"], seen[f"rank {r}'s first-epoch batches"] = cut, got[: len(cut)]
    return structural(Cause("batch_size"), built, seen)


def diagnose_samples(observed: list[Batches], pipeline: Pipeline) -> Finding | None:
    """None if every rank drew the expected batches (or their beginning); else what is wrong with the data: a
    mistake named only where its structural replay (grader/judge/proof.py) gives every rank's batches, else what
    was measured."""
    ranks = [r for r, (got, want) in enumerate(zip(observed, pipeline.expected)) if not _follows(got, want)]
    if not ranks:
        return None
    rank = ranks[0]
    got, want = observed[rank], pipeline.expected[rank]
    b = pipeline.batch_size
    drawn, shard = sum(map(len, got)), sum(map(len, want))
    if (proven := _no_sampler(observed, pipeline)) is not None:
        return Finding(
            f"no DistributedSampler: rank {rank} trained on {drawn} samples in "
            f"{pipeline.epochs} epoch(s), all {pipeline.size} every epoch, instead of its shard of "
            f"{shard // pipeline.epochs}",
            hint=pipeline.hint,
            proven=proven,
        )
    if got and got[0] and len(got[0]) != len(want[0]) and (proven := _batch_size(observed, pipeline, len(got[0]))):
        return Finding(
            f"batches of {len(got[0])} samples on rank {rank}, instead of batch_size = {b} "
            "(the batch size is per rank)",
            hint=pipeline.hint,
            proven=proven,
        )
    if (found := _named_order(observed, pipeline, rank)) is not None:
        return found
    per_epoch = len(want) // pipeline.epochs if pipeline.epochs else len(want)
    sets = [_epoch_sets(batches, per_epoch, 1)[0] for batches in observed]
    for other in range(len(observed)):
        for mine in range(other + 1, len(observed)):
            shared = sets[other] & sets[mine]
            if shared:
                return Finding(
                    f"the ranks' shards overlap: ranks {other} and {mine} both trained on "
                    f"{len(shared)} of the same samples in the first epoch; DistributedSampler splits one "
                    "permutation, the same on every rank (same seed), into disjoint shards",
                    hint=pipeline.hint,
                )
    first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    if first >= min(len(got), len(want)):
        return Finding(
            f"rank {rank} trained on {len(got)} batches, {pipeline.sampler} gives {len(want)}", hint=pipeline.hint
        )
    return Finding(
        f"rank {rank}'s batch {first + 1} held samples {got[first][:6]}..., {pipeline.sampler} "
        f"gives {want[first][:6]}...",
        hint=pipeline.hint,
    )
