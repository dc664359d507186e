"""Reference solution for exercise 15: pipeline parallelism with torch.distributed.pipelining, and the
bubble of its schedules."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def stage_layers(num_layers: int, world_size: int, rank: int) -> range:
    """The contiguous layers of stage `rank`: stage sizes differ by at most one, each layer in one stage."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not a stage of a {world_size}-stage pipeline")
    return range(rank * num_layers // world_size, (rank + 1) * num_layers // world_size)


def bubble_fraction(stages: int, micro_batches: int, schedule: str) -> float:
    """The idle fraction of a step: p - 1 slots of fill and drain on each of the m + p - 1 slots a stage spans."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: expected one of {sorted(SCHEDULES)}")
    return (stages - 1) / (micro_batches + stages - 1)


def train_pipeline(
    rank: int,
    world_size: int,
    model: nn.Sequential,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    micro_batches: int,
    schedule_name: str,
    lr: float,
) -> nn.Module:
    """One SGD step per batch; this rank runs stage `rank` of the model under the schedule named."""
    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    stage_module = nn.Sequential(*(model[i] for i in stage_layers(len(model), world_size, rank))).to(device)
    stage = PipelineStage(stage_module, rank, world_size, device)
    # the loss is the mean over a micro-batch; the schedule divides the summed gradients by m (scale_grads)
    schedule = SCHEDULES[schedule_name](stage, n_microbatches=micro_batches, loss_fn=F.mse_loss)
    optimizer = torch.optim.SGD(stage_module.parameters(), lr=lr, momentum=0.9)
    for inputs, targets in batches:
        if len(inputs) % micro_batches:
            raise ValueError(f"{len(inputs)} samples do not split into {micro_batches} equal micro-batches")
        optimizer.zero_grad()
        args = (inputs.to(device),) if rank == 0 else ()  # the first stage takes the batch
        kwargs = {"target": targets.to(device)} if rank == world_size - 1 else {}  # the last computes the loss
        schedule.step(*args, **kwargs)
        optimizer.step()
    return stage_module
