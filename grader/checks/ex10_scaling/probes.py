"""The inputs on which exercise 10's formulas are evaluated: shared by the rank side (which calls
the student's functions on them) and the judge (which reads the values back in the same order)."""

from __future__ import annotations

# Per function, the argument tuples it is called with.
PROBES: dict[str, list[tuple]] = {
    "scaled_lr": [(0.1, 256, batch, step, 5) for batch in (256, 512, 1024, 8192) for step in range(8)]
    + [(0.1, 256, 1024, step, 0) for step in (0, 3)],
    "effective_batch": [(b, w, a) for b in (8, 32) for w in (1, 4, 6) for a in (1, 3)],
    "amdahl_speedup": [(p, n) for p in (0.0, 0.5, 0.9, 0.99, 1.0) for n in (1, 2, 4, 8, 64, 10**6)],
    "parallel_efficiency": [(p, n) for p in (0.5, 0.9, 1.0) for n in (1, 2, 8, 64)],
    "ring_allreduce_bytes": [(m, w) for m in (1e6, 4e8) for w in (1, 2, 3, 4, 8, 1024)],
    "allreduce_seconds": [(4e8, w, bw) for w in (2, 8) for bw in (12.5e9, 25e9, 300e9)],
    "zero_memory_per_gpu": [(7.5e9, w, s, k) for w in (1, 8, 64) for s in (0, 1, 2, 3) for k in (12, 16)],
}
BAD_ZERO_STAGES = (4, -1)
