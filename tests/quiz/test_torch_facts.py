"""Every fact about torch that a quiz explanation states, asserted on the installed torch, so that an
upgrade that changes one fails here and not in front of a class.

The facts that need several processes run once per world size (gloo, 2 or 4 ranks on the CPU, a
FileStore in tmp_path, 60 s timeouts) and write what rank 0 saw to a JSON file the tests read.
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor

from .support import course_bank

TIMEOUT = datetime.timedelta(seconds=60)


def _init(rank: int, world: int, store: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=TIMEOUT)


def _barrier_waits(rank: int) -> dict[str, Any]:
    """Rank 1 joins late, so rank 0's all-reduces are still pending when it enters the barrier."""
    if rank == 1:
        time.sleep(1.0)
    works = [dist.all_reduce(torch.ones(1000), async_op=True) for _ in range(6)]
    before = [w.is_completed() for w in works]
    dist.barrier()
    after = [w.is_completed() for w in works]
    for work in works:
        work.wait()
    return {"pending_before_barrier": before.count(False), "completed_after_barrier": after.count(True)}


class _Logged(torch.nn.Module):
    """A stage that logs each forward, and the backward of that forward when its output's gradient arrives."""

    def __init__(self, log: list[tuple[str, int]]) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)
        self.log = log

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        number = sum(action == "F" for action, _ in self.log)
        self.log.append(("F", number))
        if out.requires_grad:
            out.register_hook(lambda grad: self.log.append(("B", number)))
        return out


def _stage_order(rank: int, world: int, micro_batches: int, schedule_name: str) -> str:
    """The forwards (F) and backwards (B) of the micro-batches on this rank's stage, in the order they ran."""
    from torch.distributed import pipelining

    torch.manual_seed(0)
    log: list[tuple[str, int]] = []
    stage = pipelining.PipelineStage(_Logged(log), rank, world, torch.device("cpu"))
    schedule = getattr(pipelining, schedule_name)(
        stage, n_microbatches=micro_batches, loss_fn=torch.nn.functional.mse_loss
    )
    x, y = torch.randn(2 * micro_batches, 4), torch.randn(2 * micro_batches, 4)
    if rank == 0:
        schedule.step(x)
    else:
        schedule.step(target=y)
    # the stage's shape-inference forward is never backpropagated: it is not a micro-batch
    backwarded = {number for action, number in log if action == "B"}
    return "".join(action for action, number in log if number in backwarded)


def _rowwise_placements(world: int) -> dict[str, str]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 8))
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
    return {name: str(tuple(_dtensor(p).placements)) for name, p in mlp.named_parameters()}


def _dtensor(parameter: torch.Tensor) -> DTensor:
    """A parallelized module's parameter, which torch types as a plain Parameter."""
    assert isinstance(parameter, DTensor), type(parameter)
    return parameter


def _two_ranks(rank: int, store: str, out: str) -> None:
    _init(rank, 2, store)
    facts: dict[str, Any] = {"barrier": _barrier_waits(rank)}
    facts["1f1b_stage0_order"] = _stage_order(rank, 2, 4, "Schedule1F1B")
    facts["gpipe_stage0_order"] = _stage_order(rank, 2, 4, "ScheduleGPipe")
    facts["rowwise"] = _rowwise_placements(2)
    if rank == 0:
        Path(out).write_text(json.dumps(facts))
    dist.destroy_process_group()


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.up(x))


def _four_ranks(rank: int, store: str, out: str) -> None:
    """A (dp, tp) = (2, 2) mesh: ColwiseParallel `up` and RowwiseParallel `down` on tp, then FSDP2 on dp."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    _init(rank, 4, store)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    block = _Block()
    parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(block, mesh=mesh["dp"])
    facts = {
        name: {"placements": str(tuple(_dtensor(p).placements)), "local": list(_dtensor(p).to_local().shape)}
        for name, p in block.named_parameters()
    }
    if rank == 0:
        Path(out).write_text(json.dumps(facts))
    dist.destroy_process_group()


def _spawn(target: Any, world: int, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "facts.json"
    mp.spawn(target, args=(str(tmp_path / "store"), str(out)), nprocs=world, join=True)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _spawn(_two_ranks, 2, tmp_path_factory.mktemp("two"))


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _spawn(_four_ranks, 4, tmp_path_factory.mktemp("four"))


def explanation(qid: str, option: int | None = None) -> str:
    question = next(q for q in course_bank().questions if q.id == qid)
    return question.explanation if option is None else question.options[option].explanation


def test_a_gloo_barrier_completes_earlier_asynchronous_all_reduces(two_ranks: dict[str, Any]) -> None:
    """overlap-wait-before-step: on gloo, `dist.barrier()` waits for the group's in-flight work
    (ProcessGroupGloo::barrier collects it), so the barrier option is wrong for another reason."""
    assert two_ranks["barrier"] == {"pending_before_barrier": 6, "completed_after_barrier": 6}
    assert "gloo's barrier does wait" in explanation("overlap-wait-before-step", 3)


def test_schedule_1f1b_runs_p_warm_up_forwards_on_stage_0(two_ranks: dict[str, Any]) -> None:
    """pp-activations-1f1b: torch's Schedule1F1B runs p forwards on stage 0 before its first backward
    (Megatron's schedule runs p - 1), so at most p micro-batches are in flight there."""
    order = two_ranks["1f1b_stage0_order"]
    assert order.startswith("FFB") and order.count("F") == order.count("B") == 4
    assert _peak_in_flight(order) == 2
    assert "p warm-up forwards" in explanation("pp-activations-1f1b")


def _peak_in_flight(order: str) -> int:
    """The most micro-batches run forward and not yet backward at any point of a stage's order."""
    held = peak = 0
    for action in order:
        held += 1 if action == "F" else -1
        peak = max(peak, held)
    return peak


def test_gpipe_runs_every_forward_before_the_first_backward(two_ranks: dict[str, Any]) -> None:
    """pp-activations-gpipe: ScheduleGPipe runs all m forwards on stage 0 before its first backward, so it
    holds m micro-batches' activations; pp-1f1b-versus-gpipe: Schedule1F1B holds at most p (2 here) of the
    same m = 4."""
    assert two_ranks["gpipe_stage0_order"] == "FFFFBBBB", "pp-activations-gpipe"
    assert _peak_in_flight(two_ranks["gpipe_stage0_order"]) == 4, "pp-activations-gpipe, pp-1f1b-versus-gpipe: m"
    assert _peak_in_flight(two_ranks["1f1b_stage0_order"]) == 2, "pp-1f1b-versus-gpipe: p"


def test_rowwise_parallel_shards_the_weight_on_dim_1_and_replicates_the_bias(two_ranks: dict[str, Any]) -> None:
    """tpex-placements and fsdptp-down-placements: nn.Linear's weight is (out, in)."""
    assert two_ranks["rowwise"] == {
        "0.weight": "(Shard(dim=0),)",
        "0.bias": "(Shard(dim=0),)",
        "1.weight": "(Shard(dim=1),)",
        "1.bias": "(Replicate(),)",
    }


def test_fsdp_over_tp_placements_on_a_2d_mesh(four_ranks: dict[str, Any]) -> None:
    """fsdptp-local-elements and fsdptp-down-placements: FSDP over a Colwise weight prints a strided
    shard first, since both split dim 0; a Rowwise weight is (Shard(0), Shard(1)). Each GPU holds
    R·C / (dp·tp) elements."""
    assert four_ranks["up.weight"] == {"placements": "(_StridedShard(dim=0, sf=2), Shard(dim=0))", "local": [4, 8]}
    assert four_ranks["down.weight"] == {"placements": "(Shard(dim=0), Shard(dim=1))", "local": [4, 8]}
    assert "_StridedShard(dim=0, sf=" in next(
        q.text for q in course_bank().questions if q.id == "fsdptp-local-elements"
    )


@pytest.mark.parametrize("x", [1.0, 2.0, 4.0, 8.0, 64.0, 256.0])
def test_bf16_steps_above_and_below_a_power_of_two(x: float) -> None:
    """mp-bf16-next-number: the gap above a power of two x is x/128, the gap below x/256, so an
    increase under x/256 is rounded away and a decrease of just over x/512 is not."""
    value = torch.tensor(x, dtype=torch.bfloat16)
    assert (value + torch.tensor(x / 128 * 0.49, dtype=torch.float32)).to(torch.bfloat16).item() == x
    assert (value.float() + x / 128).to(torch.bfloat16).item() == x + x / 128
    assert (value.float() - x / 512 * 1.1).to(torch.bfloat16).item() == x - x / 256
    assert "half the gap below" in explanation("mp-bf16-next-number")


def test_a_bf16_weight_of_one_ignores_an_update_of_minus_0_001() -> None:
    """mp-master-weights: 0.999 rounds back to 1.0 (the bf16 numbers below 1 are 1/256 apart)."""
    assert (torch.tensor(1.0, dtype=torch.bfloat16).float() - 0.001).to(torch.bfloat16).item() == 1.0
    assert torch.tensor(0.999, dtype=torch.bfloat16).item() == 1.0


def test_both_balanced_split_formulas_of_pp_balanced_split() -> None:
    """pp-balanced-split: for L = 10, W = 4, `r*L//W` bounds give 2, 3, 2, 3 and "L // W, one more for the
    last L % W stages" gives 2, 2, 3, 3; both are contiguous and differ by at most one."""
    layers, world = 10, 4
    bounds = [r * layers // world for r in range(world + 1)]
    assert [b - a for a, b in zip(bounds, bounds[1:])] == [2, 3, 2, 3]
    assert [layers // world + (r >= world - layers % world) for r in range(world)] == [2, 2, 3, 3]
    question = next(q for q in course_bank().questions if q.id == "pp-balanced-split")
    assert "give 2, 3, 2, 3" in next(o.explanation for o in question.options if o.correct)
