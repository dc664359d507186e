"""Every numeric answer in the course banks, recomputed here in plain Python.

The references are written from the physics of each question, not from the bank's formula, and
they never go through the formula engine; a question without a reference fails the test.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from grader.quiz.bank import Question
from grader.quiz.versions import draw

from .support import course_questions


def ring_bytes(world: float, size: float) -> float:
    """Bytes one rank sends: W - 1 reduce-scatter steps and W - 1 all-gather steps of size/W."""
    return (world - 1) * size / world + (world - 1) * size / world


def amdahl(p: float, n: float) -> float:
    serial_time, parallel_time = 1 - p, p / n
    return 1 / (serial_time + parallel_time)


def sampler_steps(n: int, world: int, batch: int) -> int:
    """Count the batches of one rank's padded shard by walking it."""
    indices = list(range(n))
    while len(indices) % world:
        indices.append(indices[len(indices) % n])
    shard = indices[0::world]
    return len(range(0, len(shard), batch))


def bf16_next_above(x: float) -> float:
    """The next bf16 number above x: bf16 is the top 16 bits of a float32, so add one to them."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0] >> 16
    return struct.unpack("<f", struct.pack("<I", (bits + 1) << 16))[0]


def fsdp_padded_shard(rows: int, cols: int, world: int) -> int:
    """Split rows into contiguous chunks the way torch.chunk does; every shard is padded to the largest."""
    chunk = -(-rows // world)
    sizes = [max(0, min(chunk, rows - start)) for start in range(0, chunk * world, chunk)]
    return max(sizes) * cols


def zero_sent_gb(params_billion: float, stage: float, world: float) -> float:
    """The ZeRO paper's per-step traffic: every stage reduce-scatters the gradients and all-gathers
    the updated parameters; stage 3 gathers the parameters once more, for backward."""
    collectives = ["reduce-scatter gradients", "all-gather parameters"]
    if stage == 3:
        collectives.append("all-gather parameters for backward")
    buffer_gb = params_billion * GB * 2 / GB
    return sum((world - 1) / world * buffer_gb for _ in collectives)


def ring_alpha_beta_us(megabytes: float, world: int, alpha_us: float, gb_per_s: float) -> float:
    """Walk the ring's steps one by one: each costs the latency plus one chunk's transfer time."""
    chunk_bytes = megabytes * 1e6 / world
    steps = [("reduce-scatter", i) for i in range(world - 1)] + [("all-gather", i) for i in range(world - 1)]
    return sum(alpha_us + chunk_bytes / (gb_per_s * 1e9) * 1e6 for _ in steps)


def bucket_messages(sizes: list[float], cap: float) -> int:
    """Walk the gradients in order: a bucket is sent once it holds cap or more, the rest at the end."""
    sent, filled = 0, 0.0
    for size in sizes:
        filled += size
        if filled >= cap:
            sent, filled = sent + 1, 0.0
    return sent + (1 if filled else 0)


def zero_stage_gb(params_billion: float, stage: int, world: float) -> float:
    """Per GPU: fp16 weights (sharded from stage 3), fp16 gradients (from stage 2), 12 bytes of Adam (from 1);
    stage 0 is plain DDP."""
    weights = 2 / (world if stage >= 3 else 1)
    grads = 2 / (world if stage >= 2 else 1)
    return params_billion * (weights + grads + 12 / (world if stage >= 1 else 1))


def pipeline_idle_share(stages: int, micro_batches: int) -> float:
    """Run GPipe slot by slot: a stage's forward of micro-batch i waits for the stage before, its backward for
    the stage after; count the slots each stage spends idle up to the last backward."""
    forward_end = [[0] * micro_batches for _ in range(stages)]
    for s in range(stages):
        for i in range(micro_batches):
            ready = forward_end[s - 1][i] if s else 0
            forward_end[s][i] = max(ready, forward_end[s][i - 1] if i else 0) + 1
    backward_end = [[0] * micro_batches for _ in range(stages)]
    for s in reversed(range(stages)):
        for i in range(micro_batches):
            ready = backward_end[s + 1][i] if s < stages - 1 else forward_end[s][micro_batches - 1]
            backward_end[s][i] = max(ready, backward_end[s][i - 1] if i else forward_end[s][micro_batches - 1]) + 1
    span = max(max(row) for row in backward_end)
    return 1 - 2 * micro_batches / span


def pipeline_span(stages: int, micro_batches: int) -> int:
    """Slots from the first forward to the last backward: the busy 2m slots over the busy share."""
    return round(2 * micro_batches / (1 - pipeline_idle_share(stages, micro_batches)))


def torch_bf16_bytes() -> int:
    """Bytes of one bf16 element: half a float32's 32 bits."""
    return struct.calcsize("<f") // 2


def peak_in_flight(order: str) -> int:
    """The most micro-batches a stage holds forwarded and not yet backwarded, over its order of F and B."""
    held = peak = 0
    for action in order:
        held += 1 if action == "F" else -1
        peak = max(peak, held)
    return peak


def one_f_one_b(stages: int, micro_batches: int, stage: int) -> str:
    """Stage `stage`'s order under 1F1B: p - 1 - stage warm-up forwards, then F and B in turn, then the Bs left."""
    warmup = min(stages - 1 - stage, micro_batches)
    return "F" * warmup + "FB" * (micro_batches - warmup) + "B" * warmup


GB = 1e9
REFERENCES: dict[str, Callable[[dict[str, float]], float]] = {
    "par-pipeline-bubble": lambda v: 100 * (v["p"] - 1) / (v["m"] + v["p"] - 1),
    "sampler-steps-per-epoch": lambda v: sampler_steps(int(v["N"]), int(v["W"]), int(v["b"])),
    "sampler-padding": lambda v: len(range(0, int(v["N"]), int(v["W"]))) * v["W"] - v["N"],
    "accum-steps": lambda v: next(k for k in range(1, 10_000) if k * v["W"] * v["b"] >= v["target"]) * v["W"] * v["b"],
    "scale-effective-batch": lambda v: v["W"] * v["b"] * v["k"],
    "scale-linear-lr": lambda v: v["base_lr"] * (v["W"] * v["b"]) / v["B0"],
    "scale-warmup-lr": lambda v: (v["base_lr"] * v["W"]) * (v["t"] / v["T"]),
    "amdahl-speedup": lambda v: amdahl(v["p"], v["N"]),
    "amdahl-efficiency": lambda v: 100 * amdahl(v["p"], v["N"]) / v["N"],
    "amdahl-limit": lambda v: 1 / (v["serial"] / 100),
    "zero-ddp-memory": lambda v: v["P"] * GB * 16 / GB,
    "zero1-memory": lambda v: (v["P"] * GB * 2 + v["P"] * GB * 2 + v["P"] * GB * 12 / v["N"]) / GB,
    "zero2-memory": lambda v: (v["P"] * GB * 2 + (v["P"] * GB * 2 + v["P"] * GB * 12) / v["N"]) / GB,
    "zero3-memory": lambda v: (v["P"] * GB * 2 + v["P"] * GB * 2 + v["P"] * GB * 12) / v["N"] / GB,
    "zero-min-gpus": lambda v: next(n for n in range(1, 10_000) if v["P"] * 16 / n <= v["mem"] / 2 + 1e-9),
    "fsdp-shard-elements": lambda v: fsdp_padded_shard(int(v["R"]), int(v["C"]), int(v["W"])),
    "fsdp-shard-memory": lambda v: v["P"] * 1e6 * 4 / v["W"] / 1e6,
    "ring-volume": lambda v: ring_bytes(v["W"], v["M"]),
    "ring-volume-params": lambda v: ring_bytes(v["W"], v["P"] * GB * 2) / GB,
    "ring-time": lambda v: ring_bytes(v["W"], v["P"] * 1e6 * 4) / (v["B"] * GB) * 1e3,
    "ring-naive-ratio": lambda v: (2 * (v["W"] - 1) * 1.0) / (2 * ring_bytes(v["W"], 1.0)),
    "zero-comm-volume": lambda v: zero_sent_gb(v["P"], 3, v["N"]),
    "ring-alpha-beta": lambda v: ring_alpha_beta_us(v["M"], int(v["W"]), v["alpha"], v["B"]),
    "overlap-bucket-count-small-params": lambda v: bucket_messages([0.5] * int(v["G"] * 2), 32),
    "overlap-bucket-count-equal-params": lambda v: bucket_messages([4] * int(v["N"]), 10),
    "overlap-exposed-time": lambda v: v["B"] + v["L"],
    "zero1ex-stage-memory": lambda v: zero_stage_gb(v["P"], 0, v["N"]) - zero_stage_gb(v["P"], int(v["s"]), v["N"]),
    "zero1ex-memory-practice": lambda v: v["P"] * GB * (4 + 4 + 4) / v["N"] / GB,  # master, exp_avg, exp_avg_sq
    "zero1ex-adamw-state-per-rank": lambda v: v["E"] * 1e3 * 2 * 4 / v["W"] / 1e3,
    "mp-adam-bytes-per-parameter": lambda v: v["P"] * GB * (2 + 2 + 4 + 4 + 4) / GB,
    "mp-fsdp-bytes-per-rank": lambda v: v["P"] * 1e6 * torch_bf16_bytes() / 1e6,  # the whole block, gathered
    "mp-bf16-next-number": lambda v: bf16_next_above(v["x"]),
    "mp-checkpoint-step-time": lambda v: v["F"] + v["B"] + v["F"],
    "mp-fp32-shard-bytes": lambda v: fsdp_padded_shard(int(v["R"]), int(v["C"]), int(v["W"])) * 4,  # rank 0: unpadded
    "pp-bubble-fraction": lambda v: (
        pipeline_idle_share(int(v["p"]), int(v["m"])) * pipeline_span(int(v["p"]), int(v["m"]))
    ),
    "pp-micro-batches-for-a-bubble": lambda v: next(
        m for m in range(1, 10_000) if pipeline_idle_share(int(v["p"]), m) <= v["F"] / 100 + 1e-12
    ),
    "pp-activations-gpipe": lambda v: peak_in_flight("F" * int(v["m"]) + "B" * int(v["m"])) * v["A"],
    "pp-activations-1f1b": lambda v: peak_in_flight(one_f_one_b(int(v["p"]), int(v["m"]), 0)) * v["A"],
    "pp-interleaved-bubble": lambda v: (v["p"] - 1) / v["v"] / v["m"],
    "dcp-rank0-gather-memory": lambda v: v["P"] * 1e9 * (4 + 4 + 4) / GB,
    "dcp-parallel-write-time": lambda v: (v["S"] / v["N"]) / v["B"],
    "dcp-file-count": lambda v: len([f"__{r}_0.distcp" for r in range(int(v["W"]))] + [".metadata"]),
    "dcp-reshard-files-read": lambda v: len({row * int(v["S"]) // 1024 for row in range(1024 // int(v["L"]))}),
    "dcp-async-stall": lambda v: v["G"] / v["D"],
    "tpex-forward-allreduce-bytes": lambda v: ring_bytes(v["W"], v["b"] * v["s"] * v["d"] * 2) / 1e6,
    "tpex-allreduces-per-step": lambda v: v["L"] * len(["attention", "mlp"]) * len(["g forward", "f backward"]),
    "tpex-mlp-weights-per-gpu": lambda v: (4 * v["d"] * v["d"] + v["d"] * 4 * v["d"]) * 2 / v["W"] / 1e6,
    "tpex-shard-elements": lambda v: (
        v["h"] / v["W"] * v["d"] + v["h"] / v["W"] + v["d"] * v["h"] / v["W"] + v["d"]  # w1 rows, b1, w2 cols, b2
    ),
    "tpex-allreduce-time": lambda v: ring_bytes(v["W"], v["M"] * 1e6) / (v["B"] * GB) * 1e6,
    "fsdptp-bytes-per-rank": lambda v: v["P"] * GB * (2 + 2 + 4 + 4 + 4) / v["T"] / v["D"] / GB,
    "fsdptp-dp-size": lambda v: len(range(0, int(v["W"]), 8)),
    "fsdptp-dp-coordinate": lambda v: divmod(int(v["r"]), int(v["T"]))[0],
    "fsdptp-fsdp-bytes-per-step": lambda v: 3 * ring_bytes(v["D"], v["P"] * GB * 2 / v["T"]) / 2 / GB,
    "fsdptp-local-elements": lambda v: (v["R"] // v["T"]) * v["C"] / v["D"],
}

NUMERIC = [q for q in course_questions() if q.type == "numeric"]


def test_every_numeric_question_has_a_reference() -> None:
    assert sorted(q.id for q in NUMERIC) == sorted(REFERENCES)


def test_at_least_twelve_parametric_questions() -> None:
    assert sum(q.parametric for q in NUMERIC) >= 12


@pytest.mark.parametrize("question", NUMERIC, ids=lambda q: q.id)
def test_key_matches_independent_computation(question: Question) -> None:
    """Across many versions (different parameter draws), the key equals the reference."""
    seen = set()
    for number in range(1, 61):
        item = draw([question], seed=11, number=number).items[0]
        params = dict(item.params)
        expected = REFERENCES[question.id](params)
        assert item.value == pytest.approx(expected, rel=1e-9, abs=1e-12), params
        assert item.tolerance >= 0
        seen.add(tuple(sorted(params.items())))
    assert len(seen) > 1, "parameters never vary"


@pytest.mark.parametrize("question", NUMERIC, ids=lambda q: q.id)
def test_text_shows_every_parameter_value(question: Question) -> None:
    item = draw([question], seed=5, number=3).items[0]
    assert "{" not in item.text.replace("{{", "")
    for name, value in item.params:
        assert f"{value:g}" in item.text or str(value) in item.text, (name, value)
