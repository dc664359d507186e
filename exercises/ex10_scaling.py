"""Exercise 10: the arithmetic of scaling out.

Before buying GPUs, do the sums. Six small formulas decide whether W GPUs train W times faster.

* **Linear LR scaling with warmup** (Goyal et al., 2017). Multiplying the batch by k multiplies the
  learning rate by k: `target = base_lr * batch / base_batch`. A large rate is unstable at the
  start, so during the first `warmup_steps` steps the rate climbs linearly from `base_lr` to
  `target`: at step s < warmup_steps it is `base_lr + (target - base_lr) * s / warmup_steps`, from
  then on `target`. Steps count from 0.
* **Effective batch**: the samples behind one optimizer step, per-GPU batch x W x gradient
  accumulation steps.
* **Amdahl's law**: if a fraction p of the work parallelizes, n workers give a speedup of
  `1 / ((1 - p) + p / n)`, never more than `1 / (1 - p)`; the efficiency is speedup / n.
* **Ring all-reduce volume**: each rank sends (W-1) chunks of M/W in the reduce-scatter and
  (W-1) more in the all-gather: `2 (W-1)/W x M` bytes for a message of M bytes, almost 2M however
  large W is. At a link bandwidth B (bytes per second) that takes `2 (W-1)/W x M / B` seconds.
* **ZeRO memory per GPU** (Rajbhandari et al., 2020). Mixed-precision Adam keeps, per parameter,
  2 bytes of fp16 weights, 2 bytes of fp16 gradients and K = 12 bytes of optimizer state (fp32
  master weights, momentum, variance): (2 + 2 + K) x params. Stage 1 divides the optimizer state
  by W, stage 2 also the gradients, stage 3 also the weights; stage 0 is plain DDP. Any other stage
  is an error: raise ValueError.

Plots (optional, needs matplotlib: `pip install -e .[plots]`): `python -m
grader.checks.ex10_scaling.plots OUT_DIR --file exercises/ex10_scaling.py` draws speedup vs GPUs
for NVLink, PCIe and InfiniBand, and all-reduce time vs model size, from your functions.

Run `grader check ex10` to test, `grader hint ex10` when stuck.
"""

from __future__ import annotations


def scaled_lr(base_lr: float, base_batch: int, batch: int, step: int, warmup_steps: int) -> float:
    """The learning rate at `step` for a run with `batch` samples per optimizer step."""
    raise NotImplementedError("scaled_lr")


def effective_batch(per_gpu_batch: int, world_size: int, accumulation_steps: int = 1) -> int:
    """The number of samples behind one optimizer step."""
    raise NotImplementedError("effective_batch")


def amdahl_speedup(parallel_fraction: float, n: int) -> float:
    """Amdahl's speedup on n workers when `parallel_fraction` of the work parallelizes."""
    raise NotImplementedError("amdahl_speedup")


def parallel_efficiency(parallel_fraction: float, n: int) -> float:
    """Speedup per worker (1.0 is perfect scaling)."""
    raise NotImplementedError("parallel_efficiency")


def ring_allreduce_bytes(message_bytes: float, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce of a `message_bytes` message."""
    raise NotImplementedError("ring_allreduce_bytes")


def allreduce_seconds(message_bytes: float, world_size: int, bandwidth: float) -> float:
    """Seconds for a ring all-reduce limited by `bandwidth` bytes per second per link."""
    raise NotImplementedError("allreduce_seconds")


def zero_memory_per_gpu(num_params: int, world_size: int, stage: int, optimizer_bytes: int = 12) -> float:
    """Bytes of weights, gradients and optimizer state per GPU under ZeRO `stage` (0 to 3)."""
    raise NotImplementedError("zero_memory_per_gpu")
