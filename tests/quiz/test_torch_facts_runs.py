"""The torch facts of the questions that test_torch_facts.py and test_torch_facts_banks.py leave
unpinned, asserted on the installed torch: hangs (a pipeline stage without loss_fn, dcp.save on one
rank), async DCP saves, a torch.save read without a barrier, the dtypes FSDP2 puts on the wire, TP's
collectives, DCP's read plans, activation checkpointing, and AdamW's state.

The multi-process facts come from one 2-rank gloo run (a FileStore in tmp_path, 60 s timeouts, 3 s
for the groups that are meant to time out) that writes what each rank saw to a JSON file. Where a
fact is an ordering (a save still running when another rank reads), the ranks wait for each other
through files, not for a fixed time, so that a loaded machine cannot turn the order around.
"""

from __future__ import annotations

import copy
import datetime
import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from grader.engine.supervisor import free_port

from .support import course_bank

TIMEOUT = datetime.timedelta(seconds=60)
SHORT = datetime.timedelta(seconds=3)  # the groups whose collectives are meant to hang
RELEASE_S = 30.0  # how long a blocked writer waits for the other side before it gives up and says so


def question(qid: str) -> Any:
    return next(q for q in course_bank().questions if q.id == qid)


def explanation_of(qid: str, option: int | None = None) -> str:
    found = question(qid)
    return str(found.explanation if option is None else found.options[option].explanation)


class _Wire(TorchDispatchMode):
    """Records each collective that reaches the dispatcher (c10d ops and DTensor's functional ones)
    with the dtypes of its tensors: what travels, not what the module computes with."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, list[str]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.name()
        if name.startswith(("c10d::", "_c10d_functional::")) and not any(w in name for w in ("wait", "wrap")):
            tensors = [t for t in _flatten([*args, *kwargs.values()]) if isinstance(t, torch.Tensor)]
            self.seen.append((name, sorted({str(t.dtype) for t in tensors})))
        return func(*args, **kwargs)


def _flatten(items: list[Any]) -> list[Any]:
    flat: list[Any] = []
    for item in items:
        flat.extend(_flatten(list(item)) if isinstance(item, list | tuple) else [item])
    return flat


# ---------------------------------------------------------------- pipelines


def _pipeline_hang(rank: int, schedule_name: str) -> dict[str, Any]:
    """loss_fn on the last stage only: each rank's step and how it ends, within a 3 s group."""
    from torch.distributed import pipelining

    group = dist.new_group(backend="gloo", timeout=SHORT)
    torch.manual_seed(0)
    stage = pipelining.PipelineStage(torch.nn.Linear(4, 4), rank, 2, torch.device("cpu"), group=group)
    schedule = getattr(pipelining, schedule_name)(
        stage, n_microbatches=2, loss_fn=torch.nn.functional.mse_loss if rank == 1 else None
    )
    start = time.monotonic()
    try:
        if rank == 0:
            schedule.step(torch.randn(4, 4))
        else:
            schedule.step(target=torch.randn(4, 4))
        outcome = "returned"
    except Exception as error:  # noqa: BLE001 - gloo raises RuntimeError or DistBackendError: the message is the fact
        outcome = str(error)[:300]
    return {
        "outcome": outcome,
        "seconds": time.monotonic() - start,
        "backward_ran": stage.submod.get_parameter("weight").grad is not None,
    }


def _pipeline_gradient(rank: int) -> dict[str, Any]:
    """Two stages, 4 micro-batches, mean-reduced loss_fn, scale_grads at its default: the gradients of
    both stages (gathered on rank 0) and the whole batch's mean loss."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    stage = PipelineStage(layers[rank], rank, 2, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=torch.nn.functional.mse_loss)
    if rank == 0:
        schedule.step(x)
    else:
        schedule.step(target=y)
    grads: list[Any] = [None, None]
    dist.all_gather_object(grads, cast(torch.Tensor, layers[rank].weight.grad).tolist())
    torch.manual_seed(0)
    reference = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]
    torch.nn.functional.mse_loss(reference[1](reference[0](x)), y).backward()
    return {
        "pipeline_grads": grads,
        "batch_mean_grads": [cast(torch.Tensor, layer.weight.grad).tolist() for layer in reference],
    }


def _pipeline_stage_order(rank: int) -> dict[str, Any]:
    """The second layer given to stage 0 (rank 0) and the first to stage 1: what the pipeline computes."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    torch.manual_seed(0)
    first, second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4, bias=False)
    torch.nn.init.constant_(first.bias, 1.0)
    x = torch.randn(2, 4)
    stage = PipelineStage(second if rank == 0 else first, rank, 2, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=1)
    with torch.no_grad():
        output = schedule.step(x) if rank == 0 else schedule.step()
        if rank == 1:
            return {
                "reversed_output": output.tolist(),
                "in_order": second(first(x)).tolist(),
                "stages_reversed": first(second(x)).tolist(),
            }
    return {}


# ---------------------------------------------------------------- FSDP2 dtypes, TP collectives


def _fsdp_dtypes(rank: int) -> dict[str, Any]:
    """What FSDP2 gathers and reduce-scatters under a MixedPrecisionPolicy, and under autocast with an
    fp32 FSDP, with the dtype of the weight and of the gradient inside the layer."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    runs = {
        "policy": (MixedPrecisionPolicy(param_dtype=torch.bfloat16), False),
        "policy_fp32_reduce": (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32), False),
        "autocast": (MixedPrecisionPolicy(), True),
    }
    facts: dict[str, Any] = {}
    for label, (policy, autocast) in runs.items():
        torch.manual_seed(0)
        layer = torch.nn.Linear(8, 8)
        fully_shard(layer, mp_policy=policy)
        inside: dict[str, str] = {}

        def look(module: torch.nn.Module, inputs: Any, output: torch.Tensor, inside: dict[str, str] = inside) -> None:
            weight = module.get_parameter("weight")
            inside.update(weight=str(weight.dtype), output=str(output.dtype))
            weight.register_hook(lambda grad: inside.update(grad=str(grad.dtype)))

        layer.register_forward_hook(look)
        wire = _Wire()
        with wire, torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            layer(torch.randn(4, 8)).sum().backward()
        shard = cast(Any, layer.weight)
        facts[label] = {
            "wire": wire.seen,
            "inside": inside,
            "stored": str(shard.to_local().dtype),
            "stored_grad": str(shard.grad.to_local().dtype),
        }
    return facts


def _fsdp_gradient_average(rank: int) -> dict[str, Any]:
    """FSDP2 over 2 ranks with different inputs: the full gradient against each rank's local one."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    plain = torch.nn.Linear(3, 4)
    sharded = torch.nn.Linear(3, 4)
    sharded.load_state_dict(plain.state_dict())
    fully_shard(sharded)
    x = torch.full((2, 3), float(rank + 1))
    plain(x).pow(2).mean().backward()
    sharded(x).pow(2).mean().backward()
    local: list[Any] = [None, None]
    dist.all_gather_object(local, cast(torch.Tensor, plain.weight.grad).tolist())
    return {"local_grads": local, "fsdp_grad": cast(Any, sharded.weight).grad.full_tensor().tolist()}


def _tp_collectives(rank: int) -> dict[str, Any]:
    """ColwiseParallel then RowwiseParallel at their default layouts on an input that requires grad:
    what comes out and which collectives run in forward and in backward; and the backward of
    torch.distributed.nn.functional.all_reduce."""
    import warnings

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.nn.functional import all_reduce
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    parallelize_module(block, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(3, 8, requires_grad=True)
    forward, backward = _Wire(), _Wire()
    with forward:
        out = block(x)
    with backward:
        out.sum().backward()
    # tpex-g-backward: the autograd all_reduce's backward all-reduces the gradient again
    y = torch.ones(3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it is deprecated in favour of the functional collectives
        all_reduce(y * 1.0).sum().backward()
    return {
        "output": [type(out).__name__, list(out.shape)],
        "forward": [name for name, _ in forward.seen],
        "backward": [name for name, _ in backward.seen],
        "x_grad": cast(torch.Tensor, x.grad).tolist(),
        "autograd_all_reduce_grad": cast(torch.Tensor, y.grad).tolist(),
    }


def _plain_batchnorm_under_ddp(rank: int) -> dict[str, Any]:
    """syncbn-why, the part a CPU shows: DDP leaves BatchNorm2d alone, so each rank normalizes its
    4 images with their own statistics, and keeps the affine weight equal on every rank; and
    SyncBatchNorm refuses CPU tensors in training, which is why its own test needs a GPU."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    images = torch.randn(8, 3, 5, 5)
    mine = images[4 * rank : 4 * rank + 4]
    model = DDP(torch.nn.BatchNorm2d(3))
    out = model(mine)
    out.pow(2).mean().backward()
    local = torch.nn.functional.batch_norm(mine, None, None, training=True)
    whole = torch.nn.functional.batch_norm(images, None, None, training=True)[4 * rank : 4 * rank + 4]
    weights: list[Any] = [None, None]
    dist.all_gather_object(weights, cast(torch.Tensor, model.module.weight.grad).tolist())
    try:
        torch.nn.SyncBatchNorm(3)(mine)
        sync = "ran"
    except ValueError as error:
        sync = str(error)
    return {
        "sync_bn_on_cpu": sync,
        "bn_local_stats": torch.allclose(out, local, atol=1e-5),
        "bn_global_stats": torch.allclose(out, whole, atol=1e-3),
        "bn_weight_grads_equal": weights[0] == weights[1],
    }


def _wait_in_a_hook(rank: int) -> dict[str, Any]:
    """overlap-wait-in-hook: a post-accumulate hook that starts an all-reduce and waits for it at once
    runs to the end of backward, each gradient summed before backward goes on to the next."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    order: list[str] = []

    def reduce_now(parameter: torch.Tensor) -> None:
        work = dist.all_reduce(cast(torch.Tensor, parameter.grad), async_op=True)
        cast(dist.Work, work).wait()
        order.append(f"{'reduced' if work.is_completed() else 'pending'} {names[id(parameter)]}")

    names = {id(p): name for name, p in model.named_parameters()}
    for parameter in model.parameters():
        parameter.register_post_accumulate_grad_hook(reduce_now)
    model(torch.full((2, 3), float(rank + 1))).sum().backward()
    sums: list[Any] = [None, None]
    dist.all_gather_object(sums, [cast(torch.Tensor, p.grad).sum().item() for p in model.parameters()])
    return {"hook_order": order, "hook_grads_equal": sums[0] == sums[1]}


# ---------------------------------------------------------------- activation checkpointing with FSDP


def _checkpoint_with_fsdp(rank: int) -> dict[str, Any]:
    """checkpoint_wrapper inside fully_shard, and a checkpointed region holding FSDP units: both run
    and give the gradients of the same model without checkpointing."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import fully_shard

    def build(kind: str) -> torch.nn.Module:
        torch.manual_seed(0)
        blocks = [torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()) for _ in range(2)]
        if kind == "wrapper_inside":
            blocks = [cast(torch.nn.Sequential, checkpoint_wrapper(b)) for b in blocks]
        model = torch.nn.Sequential(*blocks)
        for block in blocks:
            fully_shard(block)
        fully_shard(model)
        return model

    x = torch.randn(2, 4) + rank
    grads = {}
    for kind in ("plain", "wrapper_inside", "region_outside"):
        model = build(kind)
        if kind == "region_outside":
            out = checkpoint(model, x, use_reentrant=False)
        else:
            out = model(x)
        out.sum().backward()
        grads[kind] = [cast(Any, p).grad.full_tensor().tolist() for p in model.parameters()]
    return grads


# ---------------------------------------------------------------- saves


class _BlockedWriter(FileSystemWriter):
    """A FileSystemWriter whose write_data first waits for `release` (set by the caller): a write that is
    provably still running while the caller goes on. `started` is set when the write begins."""

    def __init__(self, path: str, release: threading.Event, started: threading.Event | None = None) -> None:
        super().__init__(path)
        self.release, self.started = release, started or threading.Event()

    def write_data(self, plan: Any, planner: Any) -> Any:
        self.started.set()
        if not self.release.wait(RELEASE_S):
            raise RuntimeError("the writer was never released")
        return super().write_data(plan, planner)


class _RecordingReader(FileSystemReader):
    """A FileSystemReader that records the files its read plans touch."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.files: set[str] = set()

    def read_data(self, plan: Any, planner: Any) -> Any:
        self.files |= {self.storage_data[item.storage_index].relative_path for item in plan.items}
        return super().read_data(plan, planner)


def _listing(folder: Path) -> list[str]:
    """The names in a checkpoint folder, which a save that failed early may not have created."""
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _lonely_dcp_save(rank: int, out: Path) -> dict[str, Any]:
    """dcp-collective-save: rank 0 alone calls dcp.save (a 3 s group); rank 1 goes on to the barrier."""
    group = dist.new_group(backend="gloo", timeout=SHORT)
    facts: dict[str, Any] = {}
    if rank == 0:
        start = time.monotonic()
        try:
            dcp.save({"w": torch.ones(4)}, checkpoint_id=str(out / "lonely"), process_group=group)
            facts["lonely_save"] = "returned"
        except Exception as error:  # noqa: BLE001 - DCP wraps gloo's timeout: the message is the fact
            facts["lonely_save"] = str(error)[:600]
        facts["lonely_save_s"] = time.monotonic() - start
        facts["lonely_files"] = _listing(out / "lonely")
    dist.barrier()
    return facts


def _async_saves(rank: int, out: Path) -> dict[str, Any]:
    """dcp-async-*: async_save returns while its write is held back; the weights changed after it
    returns; two saves started back to back; a group destroyed before the future is done."""
    from torch.distributed.fsdp import fully_shard

    facts: dict[str, Any] = {}
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 6)
    fully_shard(model)
    before = cast(Any, model.weight).full_tensor().clone()
    release = threading.Event()
    future = dcp.async_save({"model": model.state_dict()}, storage_writer=_BlockedWriter(str(out / "async"), release))
    facts["async_returned_before_write"] = not cast(Any, future).done()
    with torch.no_grad():
        model.weight.add_(100.0)  # training goes on: the next optimizer step
    release.set()
    cast(Any, future).result()
    facts["async_files"] = _listing(out / "async")
    if rank == 0:
        saved = {"model": {"weight": torch.zeros(6, 4), "bias": torch.zeros(6)}}
        dcp.load(saved, checkpoint_id=str(out / "async"), no_dist=True)
        facts["async_holds_the_weights_at_the_call"] = torch.equal(saved["model"]["weight"], before)
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(out / "sync"))
    facts["sync_files"] = _listing(out / "sync")
    # two saves started back to back, without .result() in between: the first write waits for the second's
    second_started, free = threading.Event(), threading.Event()
    free.set()
    first = dcp.async_save(
        {"x": torch.ones(2)}, storage_writer=_BlockedWriter(str(out / f"first{rank}"), second_started), no_dist=True
    )
    second = dcp.async_save(
        {"x": torch.ones(2)},
        storage_writer=_BlockedWriter(str(out / f"second{rank}"), free, started=second_started),
        no_dist=True,
    )
    cast(Any, second).result()
    try:
        cast(Any, first).result()
        facts["saves_overlapped"] = True
    except Exception as error:  # noqa: BLE001 - the writer's own "never released": the saves ran one after the other
        facts["saves_overlapped"] = str(error)[:200]
    # the group destroyed before the future is done, as at the end of a job
    group = dist.new_group(backend="gloo", timeout=SHORT)
    release = threading.Event()
    pending = dcp.async_save(
        {"w": torch.full((4,), float(rank))},
        storage_writer=_BlockedWriter(str(out / "cut"), release),
        process_group=group,
    )
    dist.destroy_process_group(group)
    release.set()
    try:
        cast(Any, pending).result()
        facts["cut_save"] = "completed"
    except Exception as error:  # noqa: BLE001 - whatever the background save raised
        facts["cut_save"] = str(error)[:200]
    dist.barrier()
    facts["cut_files"] = _listing(out / "cut")
    return facts


class _HeldFile(io.RawIOBase):
    """A file that torch.save writes through, which stops after its first write until `go_on` exists."""

    def __init__(self, path: Path, go_on: Path) -> None:
        super().__init__()
        self.file, self.go_on, self.writes = open(path, "wb"), go_on, 0  # closed by close()
        self.released = False  # whether the other rank's signal came before the deadline

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        written = self.file.write(data)
        self.file.flush()
        self.writes += 1
        if self.writes == 1:
            deadline = time.monotonic() + RELEASE_S
            while not self.go_on.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            self.released = self.go_on.exists()
        return written

    def close(self) -> None:
        self.file.close()
        super().close()


def _save_then_load(rank: int, out: Path) -> dict[str, Any]:
    """ckpt-barrier: rank 0 torch.saves, rank 1 loads without a barrier (once bytes are on disk), then
    both load after a barrier."""
    facts: dict[str, Any] = {}
    path, tried = out / "model.pt", out / "rank1-tried"
    torch.manual_seed(0)
    state = torch.nn.Linear(64, 64).state_dict()
    if rank == 0:
        held = _HeldFile(path, tried)
        torch.save(state, cast(Any, held))  # a file object as torch.save takes it; typed IO[bytes] there
        held.close()
        facts["save_held_until_rank1_tried"] = held.released
    else:
        deadline = time.monotonic() + RELEASE_S
        while (not path.exists() or path.stat().st_size == 0) and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            torch.load(path)
            facts["load_without_barrier"] = "loaded"
        except Exception as error:  # noqa: BLE001 - torch.load's error on a half-written file is the fact
            facts["load_without_barrier"] = f"{type(error).__name__}: {str(error)[:200]}"
        tried.touch()
    dist.barrier()
    facts["load_after_barrier_equal"] = torch.equal(torch.load(path)["weight"], state["weight"])
    return facts


def _read_plans(rank: int, out: Path) -> dict[str, Any]:
    """dcp-shard-then-load, dcp-reshard-files-read: the files each rank reads when it loads a 2-rank
    checkpoint into its shards, and into the whole model; dcp-metadata: what .metadata says."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    saved = torch.nn.Linear(4, 6)
    fully_shard(saved)
    dcp.save({"model": saved.state_dict()}, checkpoint_id=str(out / "plans"))
    fresh = torch.nn.Linear(4, 6)
    fully_shard(fresh)
    target = {"model": fresh.state_dict()}
    local = cast(Any, target["model"]["weight"]).to_local()
    reader = _RecordingReader(str(out / "plans"))
    dcp.load(target, storage_reader=reader)
    whole = {"model": torch.nn.Linear(4, 6).state_dict()}
    whole_reader = _RecordingReader(str(out / "plans"))
    dcp.load(whole, storage_reader=whole_reader)
    return {
        "sharded_reads": sorted(reader.files),
        "filled_in_place": torch.equal(local, cast(Any, saved.weight).to_local()),
        "whole_reads": sorted(whole_reader.files),
        "whole_equal": torch.equal(whole["model"]["weight"], cast(Any, saved.weight).full_tensor()),
    }


def _two_ranks(rank: int, store: str, out_dir: str) -> None:
    out = Path(out_dir)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2, timeout=TIMEOUT)
    facts: dict[str, Any] = {"out": out_dir}
    facts["pipeline_hang"] = {name: _pipeline_hang(rank, name) for name in ("ScheduleGPipe", "Schedule1F1B")}
    dist.barrier()
    facts.update(_pipeline_gradient(rank))
    facts.update(_pipeline_stage_order(rank))
    facts["fsdp_dtypes"] = _fsdp_dtypes(rank)
    facts.update(_fsdp_gradient_average(rank))
    facts["tp"] = _tp_collectives(rank)
    facts["checkpointed"] = _checkpoint_with_fsdp(rank)
    facts.update(_plain_batchnorm_under_ddp(rank))
    facts.update(_wait_in_a_hook(rank))
    facts.update(_lonely_dcp_save(rank, out))
    facts.update(_async_saves(rank, out))
    facts.update(_save_then_load(rank, out))
    facts.update(_read_plans(rank, out))
    dist.destroy_process_group()
    (out / f"rank{rank}.json").write_text(json.dumps(facts))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("runs")
    mp.spawn(_two_ranks, args=(str(out / "store"), str(out)), nprocs=2, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


# ---------------------------------------------------------------- pipelines


def test_a_stage_without_loss_fn_hangs_the_pipeline(ranks: list[dict[str, Any]]) -> None:
    """pp-loss-fn-every-rank: with loss_fn on the last rank only, no stage runs a backward and every rank
    blocks on a send until the group's timeout; nothing checks the schedules against each other first."""
    for name in ("ScheduleGPipe", "Schedule1F1B"):
        runs = [facts["pipeline_hang"][name] for facts in ranks]
        # the rank that times out first closes its connections, which the other then sees
        assert any("Timed out waiting" in run["outcome"] and "send" in run["outcome"] for run in runs), (
            f"pp-loss-fn-every-rank: {name}: {runs}"
        )
        for run in runs:
            assert "Timed out waiting" in run["outcome"] or "Connection closed by peer" in run["outcome"], run
            assert run["seconds"] >= 0.8 * SHORT.total_seconds(), f"pp-loss-fn-every-rank: it waited: {run}"
            assert not run["backward_ran"], f"pp-loss-fn-every-rank: {name}: no stage reaches its backward"
    assert "blocks at its first step" in explanation_of("pp-loss-fn-every-rank", 2)


def test_schedule_gradients_are_the_whole_batch_mean(ranks: list[dict[str, Any]]) -> None:
    """pp-loss-divided-twice: with scale_grads at its default and a mean-reduced loss_fn, the stages'
    gradients are those of the whole batch's mean loss: dividing the loss by m again gives 1/m of it."""
    pipeline, reference = ranks[0]["pipeline_grads"], ranks[0]["batch_mean_grads"]
    for got, want in zip(pipeline, reference):
        assert torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-6), "pp-loss-divided-twice"
        assert not torch.allclose(torch.tensor(got) / 4, torch.tensor(want), atol=1e-6), "pp-loss-divided-twice"


def test_stages_run_in_the_order_of_their_index(ranks: list[dict[str, Any]]) -> None:
    """pp-stage-order: PipelineStage does not reorder: the second layer given to stage 0 runs first."""
    last = ranks[1]
    assert last["reversed_output"] == last["stages_reversed"] != last["in_order"], "pp-stage-order"


# ---------------------------------------------------------------- mixed precision


def test_fsdp2_dtypes_on_the_wire(ranks: list[dict[str, Any]]) -> None:
    """mp-reduce-dtype and mp-autocast-and-policy: FSDP2's policy all-gathers bf16 and, without
    reduce_dtype, reduce-scatters bf16 (the gradients are computed in bf16 either way); autocast over
    an fp32 FSDP gathers and reduces fp32 and casts per op; the stored shards stay fp32 in every case."""
    runs = ranks[0]["fsdp_dtypes"]
    bf16, fp32 = "torch.bfloat16", "torch.float32"
    assert runs["policy"]["wire"] == [["c10d::_allgather_base_", [bf16]], ["c10d::_reduce_scatter_base_", [bf16]]], (
        "mp-reduce-dtype: no reduce_dtype reduces in param_dtype; mp-autocast-and-policy: bf16 on the wire"
    )
    assert runs["policy"]["inside"] == {"weight": bf16, "output": bf16, "grad": bf16}, "mp-reduce-dtype"
    fp32_reduce = runs["policy_fp32_reduce"]
    assert fp32_reduce["wire"][1] == ["c10d::_reduce_scatter_base_", [fp32]], "mp-reduce-dtype: reduce_dtype=fp32"
    assert fp32_reduce["inside"]["grad"] == bf16, "mp-reduce-dtype: the gradients are still computed in bf16"
    autocast = runs["autocast"]
    assert autocast["wire"] == [["c10d::_allgather_base_", [fp32]], ["c10d::_reduce_scatter_base_", [fp32]]], (
        "mp-autocast-and-policy: an fp32 gather, and autocast does not touch communication"
    )
    assert autocast["inside"] == {"weight": fp32, "output": bf16, "grad": fp32}, "mp-autocast-and-policy: per op"
    for run in runs.values():
        assert run["stored"] == run["stored_grad"] == fp32, "mp-autocast-and-policy: the shards stay fp32"


def _training_step(blocks: int, mode: str) -> tuple[int, list[int], list[int]]:
    """The CPU allocator's peak during backward (bytes above its level when backward starts) for
    `blocks` blocks of (1024, 256) activations, checkpointed per block, as one region, or not at all,
    and how often each block's forward started and how often it ran to its end."""
    from torch._C._profiler import _EventType

    torch.manual_seed(0)
    layers = (torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    model = torch.nn.Sequential(*(torch.nn.Sequential(*copy.deepcopy(layers)) for _ in range(blocks)))
    started, ended = [0] * blocks, [0] * blocks
    for index, block in enumerate(model):
        block.register_forward_pre_hook(lambda *_, index=index: started.__setitem__(index, started[index] + 1))
        block.register_forward_hook(lambda *_, index=index: ended.__setitem__(index, ended[index] + 1))
    x = torch.randn(1024, 256, requires_grad=True)
    if mode == "region":
        out = checkpoint(model, x, use_reentrant=False)
    elif mode == "per_block":
        out = x
        for block in model:
            out = checkpoint(block, out, use_reentrant=False)
    else:
        out = model(x)
    loss = cast(torch.Tensor, out).sum()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
        loss.backward()
    events, stack = [], list(cast(Any, profile.profiler).kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _EventType.Allocation:
            events.append(event)
    level = peak = 0
    for event in sorted(events, key=lambda e: e.start_time_ns):
        level += event.extra_fields.alloc_size
        peak = max(peak, level)
    return peak, started, ended


def test_checkpointing_the_whole_model_holds_every_block_again() -> None:
    """mp-checkpoint-granularity: recomputed as one region, the backward's peak grows by one block's
    activations (2 MiB here: the first Linear's input and the ReLU's output) per block; checkpointed
    per block, it grows only by the weight gradients. mp-checkpoint-step-time: either way each block's
    forward starts twice per step, once in forward and once recomputed in backward, and a recomputation
    stops once backward has what it saved: the last Linear of each region is not run again."""
    activations = 2 * 1024 * 256 * 4
    peaks = {mode: {n: _training_step(n, mode) for n in (4, 8)} for mode in ("region", "per_block")}
    region = (peaks["region"][8][0] - peaks["region"][4][0]) / 4
    per_block = (peaks["per_block"][8][0] - peaks["per_block"][4][0]) / 4
    assert 0.9 * activations <= region <= 1.3 * activations, f"mp-checkpoint-granularity: {region} bytes per block"
    assert per_block <= 0.4 * activations, f"mp-checkpoint-granularity: {per_block} bytes per block"
    for mode in peaks:
        assert peaks[mode][8][1] == [2] * 8, "mp-checkpoint-step-time: one extra forward per block, not two"
    assert peaks["region"][8][2] == [2] * 7 + [1] and peaks["per_block"][8][2] == [1] * 8, (
        "mp-checkpoint-step-time: the recomputation stops early, so 2F + B is the bound"
    )
    assert _training_step(4, "none")[1:] == ([1] * 4, [1] * 4)
    assert "2F + B is the bound" in explanation_of("mp-checkpoint-step-time")


def test_checkpointing_and_fsdp_nest_either_way(ranks: list[dict[str, Any]]) -> None:
    """mp-checkpoint-granularity: checkpoint_wrapper inside fully_shard, and a checkpointed region
    holding FSDP units, both run and give the gradients of the model without checkpointing."""
    grads = ranks[0]["checkpointed"]
    for kind in ("wrapper_inside", "region_outside"):
        for got, want in zip(grads[kind], grads["plain"]):
            assert torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-6), f"mp-checkpoint-granularity {kind}"
    assert "both work" in explanation_of("mp-checkpoint-granularity", 2)


# ---------------------------------------------------------------- FSDP2 and TP


def test_fsdp2_averages_the_gradients_over_its_ranks(ranks: list[dict[str, Any]]) -> None:
    """fsdptp-lr: FSDP's reduce-scatter averages over the ranks it shards over."""
    local = torch.tensor(ranks[0]["local_grads"])
    assert torch.allclose(torch.tensor(ranks[0]["fsdp_grad"]), local.mean(dim=0), atol=1e-6), "fsdptp-lr"


def test_rowwise_output_and_the_collectives_of_a_tp_block(ranks: list[dict[str, Any]]) -> None:
    """tpex-parallelize-output: Colwise then Rowwise at their default layouts return a (b, d) tensor
    that is no DTensor, after one all-reduce in forward, and one in backward for the input's gradient;
    tpex-g-backward: torch.distributed.nn.functional.all_reduce's backward all-reduces again."""
    for facts in ranks:
        tp = facts["tp"]
        assert tp["output"][1] == [3, 8] and tp["output"][0] != "DTensor", f"tpex-parallelize-output: {tp['output']}"
        assert tp["forward"] == ["_c10d_functional::all_reduce"], "tpex-parallelize-output: g in forward"
        assert tp["backward"] == ["_c10d_functional::all_reduce"], "tpex-parallelize-output: f in backward"
        assert tp["autograd_all_reduce_grad"] == [2.0, 2.0, 2.0], "tpex-g-backward: W times the gradient"
    assert ranks[0]["tp"]["x_grad"] == ranks[1]["tp"]["x_grad"], "tpex-parallelize-output: x's gradient replicated"


def test_plain_batchnorm_under_ddp_uses_each_ranks_statistics(ranks: list[dict[str, Any]]) -> None:
    """syncbn-why (the part a CPU can show; SyncBatchNorm itself runs only on a GPU): plain BN under
    DDP normalizes each rank's 4 images with their own statistics, and DDP keeps its weight in step."""
    for facts in ranks:
        assert facts["bn_local_stats"] and not facts["bn_global_stats"], "syncbn-why: per-rank statistics"
        assert facts["bn_weight_grads_equal"], "syncbn-why: DDP already keeps weight and bias equal"
        assert "expected input tensor to be on GPU" in facts["sync_bn_on_cpu"], "NEEDS_GPU's reason for syncbn-*"


def test_a_hook_may_wait_for_its_all_reduce(ranks: list[dict[str, Any]]) -> None:
    """overlap-wait-in-hook: waiting inside the hook neither deadlocks nor leaves the message in
    flight: each hook returns with its all-reduce complete, so backward waits for every message."""
    for facts in ranks:
        assert facts["hook_order"] == ["reduced 1.bias", "reduced 1.weight", "reduced 0.bias", "reduced 0.weight"], (
            f"overlap-wait-in-hook: {facts['hook_order']}"
        )
        assert facts["hook_grads_equal"], "overlap-wait-in-hook: the numbers are right"


# ---------------------------------------------------------------- checkpoints


def test_dcp_save_on_rank_0_alone_hangs(ranks: list[dict[str, Any]]) -> None:
    """dcp-collective-save: rank 0 waits in DCP's collectives for a rank that never calls them, until
    the group's timeout, and writes no checkpoint."""
    zero = ranks[0]
    assert zero["lonely_save"] != "returned" and "Timed out" in zero["lonely_save"], "dcp-collective-save"
    assert zero["lonely_save_s"] >= 0.8 * SHORT.total_seconds(), "dcp-collective-save: it waited"
    assert ".metadata" not in zero["lonely_files"], "dcp-collective-save: no checkpoint"


def test_async_save_stages_then_writes_in_the_background(ranks: list[dict[str, Any]]) -> None:
    """dcp-async-stall and dcp-async-costs: async_save returns while its write is still held back (only
    the staging blocked), the checkpoint holds the weights of the call although they changed right
    after (a staged copy in host memory), and its files are those of dcp.save."""
    for facts in ranks:
        assert facts["async_returned_before_write"], "dcp-async-stall: training waits for the staging only"
        assert facts["async_files"] == facts["sync_files"] == [".metadata", "__0_0.distcp", "__1_0.distcp"], (
            "dcp-async-costs: the same files as dcp.save"
        )
    assert ranks[0]["async_holds_the_weights_at_the_call"], "dcp-async-costs: a staged copy"


def test_async_save_futures_must_be_waited_for(ranks: list[dict[str, Any]]) -> None:
    """dcp-async-costs: nothing waits for an earlier save: a second async_save runs beside the first;
    and a group destroyed before `.result()` leaves no complete checkpoint."""
    for facts in ranks:
        assert facts["saves_overlapped"] is True, f"dcp-async-costs: {facts['saves_overlapped']}"
        assert facts["cut_save"] != "completed", "dcp-async-costs: the background save fails"
        assert facts["cut_files"] != facts["sync_files"], f"dcp-async-costs: incomplete: {facts['cut_files']}"
    assert "leaves an incomplete checkpoint" in explanation_of("dcp-async-costs", 2)


def test_torch_save_on_rank_0_does_not_hold_the_other_ranks(ranks: list[dict[str, Any]]) -> None:
    """ckpt-barrier: rank 1 gets to torch.load while rank 0's torch.save is still writing, and the
    half-written file does not load; after a dist.barrier() every rank loads rank 0's state."""
    zero, one = ranks
    assert zero["save_held_until_rank1_tried"], "ckpt-barrier: rank 1 read before the save finished"
    assert one["load_without_barrier"].startswith("RuntimeError: PytorchStreamReader failed"), (
        f"ckpt-barrier: {one['load_without_barrier']}"
    )
    assert zero["load_after_barrier_equal"] and one["load_after_barrier_equal"], "ckpt-barrier"


def test_dcp_loads_read_what_the_state_dict_asks_for(ranks: list[dict[str, Any]]) -> None:
    """dcp-shard-then-load: loading into the sharded model fills its DTensor shards in place and each
    rank reads only its own file; loading into the whole model (plain tensors, which DCP accepts)
    reads every file. dcp-reshard-files-read: saved at S = 2 and loaded at L = 2, rank 0 reads S / L = 1."""
    for rank, facts in enumerate(ranks):
        assert facts["sharded_reads"] == [f"__{rank}_0.distcp"], "dcp-shard-then-load, dcp-reshard-files-read"
        assert facts["filled_in_place"], "dcp-shard-then-load: the state dict given is filled in place"
        assert facts["whole_reads"] == ["__0_0.distcp", "__1_0.distcp"] and facts["whole_equal"], (
            "dcp-shard-then-load: the whole model read by every rank"
        )


def test_dcp_metadata_maps_every_chunk_to_its_file(ranks: list[dict[str, Any]]) -> None:
    """dcp-metadata: .metadata holds each key's global shape and dtype, and for each chunk the file and
    byte range that hold it; no tensor data."""
    metadata = FileSystemReader(str(Path(ranks[0]["out"]) / "plans")).read_metadata()
    weight = cast(Any, metadata.state_dict_metadata["model.weight"])
    assert tuple(weight.size) == (6, 4) and weight.properties.dtype == torch.float32, "dcp-metadata"
    assert [tuple(chunk.offsets) for chunk in weight.chunks] == [(0, 0), (3, 0)], "dcp-metadata: the chunks"
    files = {index.offset: info.relative_path for index, info in cast(Any, metadata.storage_data).items()
             if index.fqn == "model.weight"}  # fmt: skip
    assert files == {torch.Size([0, 0]): "__0_0.distcp", torch.Size([3, 0]): "__1_0.distcp"}, f"dcp-metadata: {files}"
    assert not any(isinstance(value, torch.Tensor) for value in vars(metadata).values()), "dcp-metadata: no data"


# ---------------------------------------------------------------- AdamW


def test_adamw_state_and_its_step_counter() -> None:
    """zero1ex-adamw-state-per-rank and dcp-rank0-gather-memory: AdamW keeps exp_avg and exp_avg_sq, fp32
    and shaped like the parameter, and a scalar step. dcp-fresh-optimizer-symptom: a fresh AdamW's first
    update is lr × sign(g), not the uninterrupted run's. dcp-step-counter: the step counter enters the
    bias corrections: restored at 0 instead of 3, the next update is that of t = 1, not t = 4."""
    lr, (beta1, beta2), eps = 0.1, (0.9, 0.999), 1e-8
    torch.manual_seed(0)
    gradients = [torch.randn(5) for _ in range(4)]
    weight = torch.nn.Parameter(torch.ones(5))
    adamw = torch.optim.AdamW([weight], lr=lr, weight_decay=0.0)
    for gradient in gradients[:3]:
        weight.grad = gradient.clone()
        adamw.step()
    state = adamw.state[weight]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"}, "zero1ex-adamw-state-per-rank"
    for name in ("exp_avg", "exp_avg_sq"):
        assert state[name].shape == weight.shape and state[name].dtype == torch.float32, "dcp-rank0-gather-memory"
    assert state["step"].numel() == 1 and int(state["step"]) == 3, "zero1ex-adamw-state-per-rank: a scalar step"
    saved_weight, saved_optimizer = weight.detach().clone(), copy.deepcopy(adamw.state_dict())

    def next_update(step: int | None) -> torch.Tensor:
        restored = torch.nn.Parameter(saved_weight.clone())
        optimizer = torch.optim.AdamW([restored], lr=lr, weight_decay=0.0)
        if step is not None:
            state_dict = copy.deepcopy(saved_optimizer)  # step() updates the loaded tensors in place
            moments = {**state_dict["state"][0], "step": torch.tensor(float(step))}
            optimizer.load_state_dict({**state_dict, "state": {0: moments}})
        restored.grad = gradients[3].clone()
        optimizer.step()
        return (restored - saved_weight).detach()

    old = saved_optimizer["state"][0]
    m = beta1 * old["exp_avg"] + (1 - beta1) * gradients[3]
    v = beta2 * old["exp_avg_sq"] + (1 - beta2) * gradients[3] ** 2

    def expected(t: int) -> torch.Tensor:
        return -lr * (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps)

    assert torch.allclose(next_update(3), expected(4), atol=1e-6), "dcp-step-counter: t = 4 uninterrupted"
    assert torch.allclose(next_update(0), expected(1), atol=1e-6), "dcp-step-counter: restored at 0, t = 1"
    assert not torch.allclose(next_update(0), next_update(3), atol=1e-3), "dcp-step-counter: the update is off"
    fresh = next_update(None)
    assert torch.allclose(fresh, -lr * torch.sign(gradients[3]), atol=1e-6), "dcp-fresh-optimizer-symptom"
    assert not torch.allclose(fresh, next_update(3), atol=1e-3), "dcp-fresh-optimizer-symptom: not the same step"


# ---------------------------------------------------------------- torchrun over two nodes

_NODE_SCRIPT = """
import json, os, sys
names = ["RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"]
env = {name: os.environ.get(name) for name in names}
with open(os.path.join(sys.argv[1], f"rank{env['RANK']}.json"), "w") as f:
    json.dump(env, f)
"""


def test_rank_and_local_rank_differ_on_the_second_node(tmp_path: Path) -> None:
    """torchrun-local-rank-device (the part a CPU can show; the invalid device needs a GPU): two torchrun
    agents as two nodes of 2 workers each (static rendezvous on one host): on the second node RANK is
    2 and 3 while LOCAL_RANK is 0 and 1, so `set_device(RANK)` asks for devices the node lacks."""
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(_NODE_SCRIPT))
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "LOCAL_RANK", "MASTER_PORT", "MASTER_ADDR"}}
    port = free_port()
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--node-rank",
                str(node),
                "--nproc-per-node",
                "2",
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "--monitor-interval",
                "0.1",
                str(script),
                str(tmp_path),
            ],  # fmt: skip
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    try:
        outputs = [agent.communicate(timeout=120)[0] for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    assert all(agent.returncode == 0 for agent in agents), outputs[0][-2000:] + outputs[1][-2000:]
    seen = {int(p.stem[4:]): json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")}
    assert sorted(seen) == [0, 1, 2, 3], f"torchrun-local-rank-device: {sorted(seen)}"
    for rank, env_seen in seen.items():
        assert env_seen["WORLD_SIZE"] == "4" and env_seen["LOCAL_WORLD_SIZE"] == "2", "torchrun-local-rank-device"
        assert env_seen["LOCAL_RANK"] == str(rank % 2), "torchrun-local-rank-device: the rank within the node"
        assert env_seen["GROUP_RANK"] == str(rank // 2), "torchrun-local-rank-device: the node"
    assert {seen[r]["RANK"] for r in (2, 3)} == {"2", "3"}, "torchrun-local-rank-device: RANK stays global"
