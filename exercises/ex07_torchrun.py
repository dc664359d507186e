"""Exercise 7: a training script for torchrun.

So far the grader started your processes. On a cluster, `torchrun` does: it starts one process
per GPU on every node, and tells each one who it is through environment variables:

* `RANK`: the process's global rank, 0..WORLD_SIZE-1 over all nodes;
* `LOCAL_RANK`: its index on this node, 0..LOCAL_WORLD_SIZE-1: the GPU it must use;
* `WORLD_SIZE`: the number of processes over all nodes;
* `MASTER_ADDR`, `MASTER_PORT`: where the rendezvous is.

`dist.init_process_group(backend, init_method="env://")` reads all of them, so the script needs
no rank or world size of its own. On two nodes of 4 GPUs, the process with RANK 5 has LOCAL_RANK 1:
it must use `cuda:1`, there is no `cuda:5` on its node. Every process runs the whole script, so
print from rank 0 only, or the log repeats W times.

Write a script, run as `torchrun --nproc-per-node 2 ex07_torchrun.py --steps 3`, that

1. reads `--steps N` with argparse;
2. picks its device in `pick_device()`: `cuda:LOCAL_RANK` (and `torch.cuda.set_device`) when
   CUDA is available, else the CPU (the `torch.accelerator` equivalents are fine too);
3. joins the group with `init_method="env://"` (nccl on GPU, gloo on CPU);
4. trains `DistributedDataParallel(nn.Linear(4, 1))` for `--steps` steps of SGD (lr 0.1,
   mean squared error) on `make_batch(rank, step)`, its rank's batch;
5. prints (or logs) one line per step from rank 0 only, then destroys the group.

The grader runs your script with torchrun's launcher over two simulated nodes (3 processes: two
on "node 0", one on "node 1", so RANK and LOCAL_RANK differ; the processes are forked rather than
fresh interpreters, to save seconds) with a `--steps` of its choosing, records what each process
does, compares the weights with one process training on all the ranks' batches, and asks
`pick_device()` what it would choose on a node with simulated GPUs.

Try it yourself: `torchrun --standalone --nproc-per-node 2 exercises/ex07_torchrun.py --steps 3`.
Run `grader check ex07` to test, `grader hint ex07` when stuck.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

FEATURES, BATCH = 4, 8


def make_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch at this step (given: the grader knows it too)."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    inputs = torch.randn(BATCH, FEATURES, generator=generator)
    return inputs, inputs.sum(dim=1, keepdim=True)


def pick_device() -> torch.device:
    """This process's device: its GPU on this node, or the CPU."""
    raise NotImplementedError("pick_device")


def main() -> None:
    """Parse --steps, join the group from the environment, train with DDP, log from rank 0."""
    raise NotImplementedError("main")


if __name__ == "__main__":
    main()
