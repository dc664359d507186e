"""Exercise 1: form a process group.

Every distributed PyTorch program begins the same way. W copies of the program start (one per
GPU, or here one per CPU process), and each must find the others before any data can move. That
meeting is the *rendezvous*; what comes out of it is the *process group*, the object every
collective (all_reduce, broadcast, barrier) runs on.

Three facts decide how you join:

* **Who you are.** Each process has a `rank` in 0..W-1 and knows the `world_size` W.
* **Where to meet.** A launcher (torchrun, a cluster scheduler, or today the grader) puts the
  address of the rendezvous in the environment: MASTER_ADDR and MASTER_PORT.
  `dist.init_process_group` reads them when you pass no `init_method` ("env://"). Never hard-code
  them: a fixed port collides the moment two jobs share a machine.
* **How to talk.** The *backend*: NCCL for GPUs (fast, GPU only), Gloo for CPUs (works everywhere).
  Under NCCL each process must own one GPU of its machine, before the group is first used, or
  every rank piles onto GPU 0. That GPU is the process's *local rank*, its index on its own
  machine, which a launcher puts in the environment as LOCAL_RANK: `rank` counts over every
  machine, and on the second of two 4-GPU machines rank 5 is GPU 1. So
  `torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))` (on one machine the two agree).

When the work is done, `dist.destroy_process_group()` releases the group so the process can exit
cleanly (without it, Gloo can abort at exit).

API: `torch.distributed.init_process_group(backend, rank=..., world_size=...)`,
`torch.cuda.is_available()`, `torch.cuda.set_device(i)` (or the device-generic
`torch.accelerator.is_available()`, `torch.accelerator.set_device_index(i)`),
`torch.distributed.destroy_process_group()`.

Run `grader check ex01` to test, `grader hint ex01` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def setup_ddp(rank: int, world_size: int, backend: str | None = None) -> None:
    """Join the default process group as `rank` of `world_size`.

    backend: "gloo" or "nccl"; when None, choose NCCL if a GPU is available, else Gloo.
    The rendezvous address is already in the environment (MASTER_ADDR, MASTER_PORT).
    """
    raise NotImplementedError("setup_ddp")


def cleanup_ddp() -> None:
    """Leave and destroy the default process group."""
    raise NotImplementedError("cleanup_ddp")
