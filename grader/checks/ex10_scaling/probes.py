"""The inputs on which exercise 10's formulas are evaluated: shared by the rank side (which calls
the student's functions on them) and the judge (which reads the values back in the same order)."""

from __future__ import annotations

import random

# Per function, the argument tuples it is called with.
PROBES: dict[str, list[tuple]] = {
    "scaled_lr": [(0.1, 256, batch, step, 5) for batch in (256, 512, 1024, 8192) for step in range(8)]
    + [(0.1, 256, 1024, step, 0) for step in (0, 3)],
    "effective_batch": [(b, w, a) for b in (8, 32) for w in (1, 4, 6) for a in (1, 3)],
    "amdahl_speedup": [(p, n) for p in (0.0, 0.5, 0.9, 0.99, 1.0) for n in (1, 2, 4, 8, 64, 10**6)],
    "parallel_efficiency": [(p, n) for p in (0.5, 0.9, 1.0) for n in (1, 2, 8, 64)],
    "ring_allreduce_bytes": [(m, w) for m in (1e6, 4e8) for w in (1, 2, 3, 4, 8, 1024)],
    "allreduce_seconds": [(4e8, w, bw) for w in (2, 3, 8, 1024) for bw in (12.5e9, 25e9, 300e9)],
    "zero_memory_per_gpu": [(7.5e9, w, s, k) for w in (1, 8, 64) for s in (0, 1, 2, 3) for k in (12, 16)],
}
BAD_ZERO_STAGES = (4, -1)
# The student's names of each function's parameters, for messages that say which one slipped.
PARAMS: dict[str, tuple[str, ...]] = {
    "scaled_lr": ("base_lr", "base_batch", "batch", "step", "warmup_steps"),
    "effective_batch": ("per_gpu_batch", "world_size", "accumulation_steps"),
    "amdahl_speedup": ("parallel_fraction", "n"),
    "parallel_efficiency": ("parallel_fraction", "n"),
    "ring_allreduce_bytes": ("message_bytes", "world_size"),
    "allreduce_seconds": ("message_bytes", "world_size", "bandwidth"),
    "zero_memory_per_gpu": ("num_params", "world_size", "stage", "optimizer_bytes"),
}


def random_probes(seed: int) -> dict[str, list[tuple]]:
    """Inputs drawn anew for every grading: a fixed grid could be answered from a table.

    Sorted where a property compares neighbours (n for Amdahl, W for the ring, the step for warmup).
    """
    rng = random.Random(seed)
    fraction = round(rng.uniform(0.05, 0.995), 4)
    sizes = sorted(rng.sample(range(1, 5000), 6))
    worlds = sorted(rng.sample(range(2, 2049), 5))
    base_lr, base_batch = round(rng.uniform(0.01, 1.0), 5), rng.choice((32, 64, 128, 256))
    batch, warmup = base_batch * rng.choice((2, 4, 8, 16)), rng.randrange(2, 30)
    message = float(rng.randrange(10**5, 10**10))
    params = float(rng.randrange(10**6, 10**11))
    return {
        "scaled_lr": [(base_lr, base_batch, batch, step, warmup) for step in range(0, warmup + 4)],
        "effective_batch": [(rng.randrange(1, 512), rng.randrange(1, 1025), rng.randrange(1, 65)) for _ in range(6)],
        "amdahl_speedup": [(fraction, n) for n in sizes],
        "parallel_efficiency": [(fraction, n) for n in sizes],
        "ring_allreduce_bytes": [(message, w) for w in worlds],
        "allreduce_seconds": [(message, w, float(rng.randrange(10**9, 10**12))) for w in worlds],
        "zero_memory_per_gpu": [(params, w, stage, rng.choice((12, 16))) for w in worlds[:2] for stage in range(4)],
    }
