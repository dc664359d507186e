"""Reference solution for exercise 2: shard the data with DistributedSampler."""

from __future__ import annotations

from torch.utils.data import DataLoader, Dataset, DistributedSampler


def make_loader(dataset: Dataset, rank: int, world_size: int, batch_size: int, seed: int = 0) -> DataLoader:
    """This rank's shard, reshuffled by the sampler with the same seed on every rank."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def start_epoch(loader: DataLoader, epoch: int) -> None:
    """Tell the sampler which epoch it is, so that each epoch has its own order."""
    loader.sampler.set_epoch(epoch)
