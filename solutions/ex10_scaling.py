"""Reference solution for exercise 10: the arithmetic of scaling out."""

from __future__ import annotations

ZERO_STAGES = (0, 1, 2, 3)


def scaled_lr(base_lr: float, base_batch: int, batch: int, step: int, warmup_steps: int) -> float:
    """Linear scaling rule with a linear warmup from base_lr to the scaled rate."""
    target = base_lr * batch / base_batch
    if step >= warmup_steps:
        return target
    return base_lr + (target - base_lr) * step / warmup_steps


def effective_batch(per_gpu_batch: int, world_size: int, accumulation_steps: int = 1) -> int:
    """Samples behind one optimizer step."""
    return per_gpu_batch * world_size * accumulation_steps


def amdahl_speedup(parallel_fraction: float, n: int) -> float:
    """Only the parallel part shrinks with n; the serial part stays."""
    return 1.0 / ((1.0 - parallel_fraction) + parallel_fraction / n)


def parallel_efficiency(parallel_fraction: float, n: int) -> float:
    return amdahl_speedup(parallel_fraction, n) / n


def ring_allreduce_bytes(message_bytes: float, world_size: int) -> float:
    """Bytes each rank sends: reduce-scatter then all-gather, (W-1) chunks of M/W each."""
    return 2.0 * (world_size - 1) / world_size * message_bytes


def allreduce_seconds(message_bytes: float, world_size: int, bandwidth: float) -> float:
    """Bandwidth-bound time of a ring all-reduce (bandwidth in bytes per second per link)."""
    return ring_allreduce_bytes(message_bytes, world_size) / bandwidth


def zero_memory_per_gpu(num_params: int, world_size: int, stage: int, optimizer_bytes: int = 12) -> float:
    """Bytes of model state per GPU under mixed precision: 2 (fp16 weights) + 2 (fp16 grads) + K
    (fp32 master weights and optimizer moments) per parameter; stage s shards the first s of
    (optimizer states, gradients, weights) over the W ranks."""
    if stage not in ZERO_STAGES:
        raise ValueError(f"ZeRO stage must be one of {ZERO_STAGES}, not {stage!r}")
    weights, grads, optimizer = 2.0 * num_params, 2.0 * num_params, float(optimizer_bytes) * num_params
    if stage >= 1:
        optimizer /= world_size
    if stage >= 2:
        grads /= world_size
    if stage >= 3:
        weights /= world_size
    return weights + grads + optimizer
