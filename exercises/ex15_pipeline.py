"""Exercise 15: pipeline parallelism: a model split into stages, micro-batches, and the bubble.

Data parallelism (exercises 3-6, 12) copies the model; **pipeline parallelism** cuts it. A stack of
L layers is split into W **stages** of contiguous layers, one per rank: rank 0 holds the first
layers, rank W-1 the last. A batch flows forward from stage to stage (each sends its activations to
the next) and the gradients flow back. One batch at a time would leave every stage but one idle, so
the batch is cut into m **micro-batches** that follow each other down the pipe.

`torch.distributed.pipelining` does the sending and the ordering:

    stage = PipelineStage(stage_module, rank, world_size, device)  # stage index = rank, here
    schedule = ScheduleGPipe(stage, n_microbatches=m, loss_fn=F.mse_loss)   # or Schedule1F1B
    schedule.step(inputs)             # on rank 0 (the first stage): the whole batch, split into m
    schedule.step(target=targets)     # on rank W-1 (the last stage): it computes the loss
    schedule.step()                   # on the stages between

`step` runs the forward and the backward of every micro-batch and leaves the gradients of this
stage's parameters in `.grad`; the optimizer steps after it, once per batch.

**The loss.** The last stage computes `loss_fn` on each micro-batch (a mean over its b/m samples)
and backpropagates it. The gradients of the m micro-batches add up in `.grad`; with
`scale_grads=True` (the default) the schedule then divides them by m, so that the result is the
gradient of the whole batch's mean loss, the same as one process on the whole batch. Turn one of
the two off without the other and the gradient is m times (or 1/m of) the right one.

**The schedules** (p = W stages, m micro-batches, each forward or backward of one micro-batch on
one stage taking one time slot):
* GPipe: every forward, then every backward (fill, drain). Stage p-1 starts p-1 slots late and stage 0
  waits p-1 slots for the first gradient: each stage is idle p-1 of the m + p - 1 slots of each phase.
* 1F1B: after p-1-r warm-up forwards, stage r alternates one forward and one backward. Same idle
  time, but a stage keeps at most p micro-batches' activations in flight instead of m.
The **bubble fraction** is the share of the step's stage-slots that are idle: (p-1)/(m+p-1) for both.
It shrinks as m grows, which is why m >> p. (Interleaved schedules, `ScheduleInterleaved1F1B`, give
each rank v stages and divide the bubble by about v; they run on gloo in torch 2.13 but are not
asked for here.)

You write:
* `stage_layers(num_layers, world_size, rank)`: the layers of stage `rank`, as a range (or list) of
  indices: contiguous, in order (stage 0 the first), every layer in exactly one stage, sizes that
  differ by at most one (5 layers on 2 stages: 3 and 2, or 2 and 3). Raise ValueError for a rank
  outside 0..world_size-1.
* `bubble_fraction(stages, micro_batches, schedule)`: the idle fraction above, a number in [0, 1)
  (not a percentage), for schedule "gpipe" or "1f1b"; ValueError for another name.
* `train_pipeline(rank, world_size, model, batches, micro_batches, schedule_name, lr)`: the group is
  formed; every rank gets the whole `model` (an `nn.Sequential` of layers, built alike on every
  rank) and the whole `batches` (a list of (inputs, targets) pairs, one per optimizer step). Keep
  the layers `stage_layers` gives this rank (`nn.Sequential(*(model[i] for i in layers))`), build
  the stage and the schedule ("gpipe": `ScheduleGPipe`, "1f1b": `Schedule1F1B`) with
  `loss_fn=torch.nn.functional.mse_loss`, and per batch: `optimizer.zero_grad()`, `schedule.step(...)`
  as above, `optimizer.step()`, with `torch.optim.SGD(stage_module.parameters(), lr=lr, momentum=0.9)`.
  If `micro_batches` does not divide a batch, raise ValueError naming both sizes (torch's own error
  comes late and says little). Under nccl, use `torch.device("cuda", rank)`. Return the stage module.

The grader checks that the stages hold every layer once, in order and balanced (it recognises the
layers by their values); that every step of the stages together equals one process training the
whole model on the whole batch; that "1f1b" runs 1F1B's order; and that your bubble fraction equals
the one it measures from the order your stages ran their micro-batches in (the schedule's own
timeline, replayed in unit time slots).

API: `torch.distributed.pipelining.PipelineStage`, `ScheduleGPipe`, `Schedule1F1B`, `Schedule.step`.

Run `grader check ex15` to test, `grader hint ex15` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe


def stage_layers(num_layers: int, world_size: int, rank: int) -> range:
    """The contiguous, balanced slice of layers that stage `rank` holds."""
    raise NotImplementedError("stage_layers")


def bubble_fraction(stages: int, micro_batches: int, schedule: str) -> float:
    """The fraction of a step's stage-slots that are idle under `schedule`."""
    raise NotImplementedError("bubble_fraction")


def train_pipeline(
    rank: int,
    world_size: int,
    model: nn.Sequential,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    micro_batches: int,
    schedule_name: str,
    lr: float,
) -> nn.Module:
    """Train this rank's stage of `model` one SGD step per batch under the pipeline schedule named."""
    raise NotImplementedError("train_pipeline")
