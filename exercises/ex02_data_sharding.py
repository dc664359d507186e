"""Exercise 2: shard the data with DistributedSampler.

Data parallelism gives each of the W ranks a different slice of every epoch. If each rank read the
whole dataset, the W gradients would be computed on the same samples: W times the work for the
gradient of one process. `torch.utils.data.DistributedSampler` does the slicing:

* it draws one permutation of the dataset indices from a generator seeded with `seed + epoch`,
  *identical on every rank*;
* pads it (by repeating a few indices) to a multiple of W, so every rank gets the same number of
  samples and no rank waits for a missing batch;
* rank r takes every W-th index starting at r.

Two consequences you must handle:

* The permutation depends on the epoch, but the sampler does not know which epoch it is unless you
  tell it: call `sampler.set_epoch(epoch)` before iterating, or every epoch repeats the same order.
* Shuffling belongs to the sampler. `DataLoader(shuffle=True)` together with a sampler is an error.

API: `DistributedSampler(dataset, num_replicas=..., rank=..., shuffle=True, seed=...)`,
`DataLoader(dataset, batch_size=..., sampler=...)`, `sampler.set_epoch(epoch)`.

Run `grader check ex02` to test, `grader hint ex02` when stuck.
"""

from __future__ import annotations

from torch.utils.data import DataLoader, Dataset, DistributedSampler


def make_loader(dataset: Dataset, rank: int, world_size: int, batch_size: int, seed: int = 0) -> DataLoader:
    """A DataLoader that yields this rank's shard of `dataset` in batches of `batch_size`.

    The shards of all ranks together must cover the dataset, shuffled with `seed`.
    """
    raise NotImplementedError("make_loader")


def start_epoch(loader: DataLoader, epoch: int) -> None:
    """Prepare `loader` (made by make_loader) for epoch number `epoch` (0, 1, 2, ...)."""
    raise NotImplementedError("start_epoch")
