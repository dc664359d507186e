"""The torch facts that banks 01-06 state (and those of 07-13 that test_torch_facts.py does not pin),
asserted on the installed torch. Each assertion names the question it pins. The first tests hold the
tables of torch_facts.py to the banks: every question is pinned, needs a GPU (and says why), or rests
on no torch fact (and says why), so that no question, new or renamed, goes silently unpinned.

The multi-process facts come from one 2-rank gloo run (init from the environment, as torchrun's
workers do, on a port the parent found free), one failing mp.spawn, and one torchrun run.
"""

from __future__ import annotations

import datetime
import inspect
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from .support import course_bank
from .torch_facts import NEEDS_GPU, NO_TORCH_FACT, PINNED

TIMEOUT = datetime.timedelta(seconds=60)


def _indices(n: int) -> Any:
    """A dataset of n indices (DistributedSampler and DataLoader only need its length)."""
    return range(n)


def _row(model: torch.nn.Module) -> list[float]:
    """The first three entries of the first layer's weight gradient, which depend on the rank's input."""
    grad = model.get_parameter("0.weight").grad
    assert grad is not None
    return cast(list[float], grad[0, :3].tolist())


def question(qid: str) -> Any:
    return next(q for q in course_bank().questions if q.id == qid)


def test_every_question_is_pinned_needs_a_gpu_or_rests_on_no_torch_fact() -> None:
    ids = {q.id for q in course_bank().questions}
    without = [qid for ids_ in NO_TORCH_FACT.values() for qid in ids_]
    tables = {"PINNED": set(PINNED), "NEEDS_GPU": set(NEEDS_GPU), "NO_TORCH_FACT": set(without)}
    assert len(without) == len(set(without)), "a question listed twice in NO_TORCH_FACT"
    for (name, listed), (other, also) in itertools.combinations(tables.items(), 2):
        assert not listed & also, f"in both {name} and {other}: {sorted(listed & also)}"
    classified = set().union(*tables.values())
    assert not ids - classified, (
        f"questions in no table of tests/quiz/torch_facts.py: {sorted(ids - classified)} (pin the torch fact "
        "each answer rests on, or list it under NEEDS_GPU or NO_TORCH_FACT with the reason)"
    )
    assert not classified - ids, f"listed in tests/quiz/torch_facts.py but not in the banks: {sorted(classified - ids)}"
    assert all(reason.strip() for reason in [*NEEDS_GPU.values(), *NO_TORCH_FACT, *PINNED.values()])


def _tests_naming(qid: str, modules: tuple[ModuleType, ...]) -> list[Callable[..., Any]]:
    """The test functions of `modules` whose source names the question id."""
    named = re.compile(rf"(?<![a-z0-9-]){re.escape(qid)}(?![a-z0-9-])")
    return [
        function
        for module in modules
        for name, function in vars(module).items()
        if name.startswith("test_") and callable(function) and named.search(inspect.getsource(function))
    ]


def test_every_pinned_fact_is_asserted_by_a_test() -> None:
    from . import test_torch_facts, test_torch_facts_runs

    modules = (sys.modules[__name__], test_torch_facts, test_torch_facts_runs)
    unasserted = sorted(qid for qid in PINNED if not _tests_naming(qid, modules))
    assert not unasserted, f"PINNED but named by no test in test_torch_facts*.py: {unasserted}"


def test_every_gpu_fact_has_a_test_that_skips_with_its_reason() -> None:
    from . import test_torch_facts_gpu

    for qid, reason in NEEDS_GPU.items():
        tests = _tests_naming(qid, (test_torch_facts_gpu,))
        reasons = [mark.kwargs.get("reason") for test in tests for mark in getattr(test, "pytestmark", [])]
        assert reason in reasons, f"{qid}: no test in test_torch_facts_gpu.py names it and skips with its reason"


# ---------------------------------------------------------------- one process, no group


def test_signature_defaults() -> None:
    ddp = inspect.signature(DDP.__init__).parameters
    assert ddp["find_unused_parameters"].default is False, "unused-params-hang"
    assert ddp["static_graph"].default is False, "unused-params-flags"
    assert hasattr(DDP, "join") and "join" in dir(DDP), "hang-uneven-batches"
    assert "timeout" in inspect.signature(dist.init_process_group).parameters, "hang-timeout"
    sampler = inspect.signature(DistributedSampler.__init__).parameters
    assert sampler["shuffle"].default is True and sampler["seed"].default == 0, "sampler-set-epoch"
    assert sampler["drop_last"].default is False, "sampler-steps-per-epoch"
    assert dist._DEFAULT_FIRST_BUCKET_BYTES == 1024 * 1024, "overlap-ddp-bucket-cap: first bucket 1 MB"
    assert not dist.is_mpi_available(), "pg-backend: a standard build has no MPI backend"
    assert dist.is_gloo_available(), "pg-backend"
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.pipelining import ScheduleGPipe

    assert inspect.signature(ScheduleGPipe.__init__).parameters["scale_grads"].default is True, "pp-scale-grads"
    assert MixedPrecisionPolicy(param_dtype=torch.bfloat16).reduce_dtype is None, "mp-reduce-dtype: no default"
    assert StateDictOptions().full_state_dict is False, "dcp-state-dict-api: get_state_dict keeps the shards"
    assert StateDictOptions(full_state_dict=True, cpu_offload=True).cpu_offload, "fsdp-full-state-dict"


def test_ddp_needs_a_process_group() -> None:
    assert not dist.is_initialized()
    with pytest.raises((ValueError, RuntimeError), match="process group"):
        DDP(torch.nn.Linear(2, 2))  # par-dp-vs-ddp: "DDP needs an initialized process group"


@pytest.mark.parametrize(("n", "world"), [(10, 3), (1001, 4), (17, 8), (12, 4)])
def test_distributed_sampler_shards(n: int, world: int) -> None:
    shards: list[list[int]] = [list(DistributedSampler(_indices(n), num_replicas=world, rank=r)) for r in range(world)]
    per_rank = -(-n // world)
    assert all(len(s) == per_rank for s in shards), "sampler-steps-per-epoch: ceil(N / W) indices per rank"
    flat = [i for s in shards for i in s]
    assert len(flat) - len(set(flat)) == world * per_rank - n, "sampler-padding: W*ceil(N/W) - N repeated"
    assert set(flat) == set(range(n)), "sampler-purpose"
    if n % world == 0:
        assert len(set(flat)) == len(flat), "sampler-purpose: disjoint shards"


def test_distributed_sampler_epochs_and_seeds() -> None:
    sampler: DistributedSampler[int] = DistributedSampler(_indices(100), num_replicas=2, rank=0)
    first, again = list(sampler), list(sampler)
    assert first == again, "sampler-set-epoch: without set_epoch every epoch repeats the permutation"
    generator = torch.Generator()
    generator.manual_seed(0 + 0)
    assert first == torch.randperm(100, generator=generator).tolist()[0::2], "sampler-set-epoch: seed + epoch"
    sampler.set_epoch(1)
    assert list(sampler) != first, "sampler-set-epoch"
    generator.manual_seed(0 + 1)
    assert list(sampler) == torch.randperm(100, generator=generator).tolist()[0::2], "sampler-set-epoch"
    by_rank_seed: list[set[int]] = [
        set(DistributedSampler(_indices(100), num_replicas=2, rank=r, seed=r)) for r in range(2)
    ]
    assert by_rank_seed[0] & by_rank_seed[1], "sampler-rank-seed: shards cut from different permutations overlap"
    assert len(by_rank_seed[0] | by_rank_seed[1]) < 100, "sampler-rank-seed: and some samples go unseen"
    with pytest.raises(ValueError):
        DataLoader(_indices(10), sampler=DistributedSampler(_indices(10), num_replicas=2, rank=0), shuffle=True)
    # sampler-shuffle-conflict: a ValueError


def test_sync_batchnorm_conversion_keeps_the_tensors() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4))
    bn = model[1]
    weight, mean = bn.weight, bn.running_mean
    converted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(converted[1], torch.nn.SyncBatchNorm), "syncbn-convert"
    assert converted[1].weight is weight and converted[1].running_mean is mean, "syncbn-convert: same tensors"


def test_batchnorm_updates_its_running_stats_at_every_forward() -> None:
    bn = torch.nn.BatchNorm1d(3)
    for _ in range(8):
        bn(torch.randn(4, 3))
    assert bn.num_batches_tracked is not None
    assert int(bn.num_batches_tracked) == 8, "accum-batchnorm: the running stats move at every micro-batch"


def test_gradient_hooks() -> None:
    weight = torch.nn.Parameter(torch.ones(3))
    seen: dict[str, Any] = {}
    weight.register_hook(lambda grad: seen.update(tensor_hook=weight.grad))
    weight.register_post_accumulate_grad_hook(lambda p: seen.update(post=None if p.grad is None else 1))
    (weight * 2).sum().backward()
    assert seen == {"tensor_hook": None, "post": 1}, "overlap-why-post-accumulate"
    frozen = torch.nn.Parameter(torch.ones(3), requires_grad=False)
    with pytest.raises(RuntimeError):
        frozen.register_post_accumulate_grad_hook(lambda p: None)  # overlap-frozen-grad: that raises
    embedding = torch.nn.Embedding(5, 3)
    head = torch.nn.Linear(3, 5, bias=False)
    head.weight = embedding.weight
    model = torch.nn.ModuleDict({"embedding": embedding, "head": head})
    assert len(list(model.parameters())) == 1, "overlap-tied-weight-once: listed once"
    calls: list[torch.Tensor] = []
    embedding.weight.register_post_accumulate_grad_hook(lambda p: calls.append(p.grad.clone()))
    head(embedding(torch.tensor([1, 2]))).sum().backward()
    grad = embedding.weight.grad
    assert grad is not None and len(calls) == 1 and torch.equal(calls[0], grad), "overlap-tied-weight-once"


def test_zero_grad_and_adam_scale() -> None:
    a, b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    optimizer = torch.optim.AdamW(a.parameters())
    for layer in (a, b):
        layer(torch.randn(2, 3)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    assert a.weight.grad is None and b.weight.grad is not None, "zero1ex-zero-grad: only its own parameters"
    assert optimizer.state[a.weight]["exp_avg"].abs().sum() > 0, "zero1ex-zero-grad: state kept"
    assert inspect.signature(torch.optim.Optimizer.zero_grad).parameters["set_to_none"].default is True
    # nosync-zero-grad: zero_grad drops what was accumulated in .grad
    torch.manual_seed(0)
    grads = [torch.randn(4) for _ in range(3)]
    runs = []
    for scale in (1.0, 4.0):
        p = torch.nn.Parameter(torch.ones(4))
        adam = torch.optim.AdamW([p], lr=0.1)
        for g in grads:
            p.grad = g * scale
            adam.step()
        runs.append((p.detach().clone(), adam.state[p]["exp_avg"], adam.state[p]["exp_avg_sq"]))
    assert torch.allclose(runs[0][0], runs[1][0], atol=1e-5), "zero1ex-adam-scale: nearly the same weights"
    assert torch.allclose(runs[1][1], 4 * runs[0][1]), "zero1ex-adam-scale: first moment W times"
    assert torch.allclose(runs[1][2], 16 * runs[0][2]), "zero1ex-adam-scale: second moment W² times"


def test_floating_point_formats_and_saved_tensors() -> None:
    bf16, fp16, fp32 = torch.finfo(torch.bfloat16), torch.finfo(torch.float16), torch.finfo(torch.float32)
    assert bf16.eps == 2**-7 and bf16.max > 3e38 and bf16.max / fp32.max > 0.99, "mp-bf16-format"
    assert fp16.eps == 2**-10 and fp16.max == 65504, "mp-bf16-format, mp-why-loss-scaling"
    assert fp16.tiny > bf16.tiny == fp32.tiny, "mp-why-loss-scaling: fp16 underflows first"
    packed: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(tuple(t.shape))
        return t

    x = torch.randn(2, 3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        (x.sin() * 2).sum()
    assert packed == [(2, 3)], "mp-what-is-saved: the input sin saves for backward"
    from torch.distributed.pipelining.microbatch import split_args_kwargs_into_chunks

    chunks, _ = split_args_kwargs_into_chunks((torch.randn(6, 4),), {}, 4)
    assert [c[0].shape[0] for c in chunks] == [2, 2, 1, 1], "pp-uneven-micro-batches: 6 into 2, 2, 1, 1"


# ---------------------------------------------------------------- a failing mp.spawn


def _fails(index: int, marker: str) -> None:
    if index == 1:
        raise RuntimeError(f"rank {index} failed on purpose")
    time.sleep(60)
    Path(marker).write_text("survived")


def test_spawn_join_false_and_a_failing_child(tmp_path: Path) -> None:
    marker = tmp_path / "survivor"
    start = time.monotonic()
    context = mp.spawn(_fails, args=(str(marker),), nprocs=2, join=False)
    assert isinstance(context, mp.ProcessContext) and time.monotonic() - start < 30, "launch-join"
    with pytest.raises(mp.ProcessRaisedException, match="rank 1 failed on purpose"):
        while not context.join(timeout=30):
            pass
    assert time.monotonic() - start < 50 and not marker.exists(), "launch-child-error: the others are ended"
    assert all(not p.is_alive() for p in context.processes), "launch-failure-restart: spawn does not retry"


# ---------------------------------------------------------------- torchrun

_TORCHRUN_SCRIPT = """
import json, os, sys
names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES",
         "TORCHELASTIC_RESTART_COUNT"]
env = {name: os.environ.get(name) for name in names}
out = sys.argv[1]
with open(os.path.join(out, f"{env['RANK']}-{env['TORCHELASTIC_RESTART_COUNT']}.json"), "w") as f:
    json.dump(env, f)
if env["RANK"] == "1" and env["TORCHELASTIC_RESTART_COUNT"] == "0":
    sys.exit(3)
"""


def test_torchrun_environment_and_restarts(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(_TORCHRUN_SCRIPT))
    env = {k: v for k, v in os.environ.items() if k not in {"CUDA_VISIBLE_DEVICES", "RANK", "MASTER_PORT"}}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--max-restarts", "1", "--monitor-interval", "0.1", str(script), str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(runs) == {"0-0", "1-0", "0-1", "1-1"}, f"launch-failure-restart: both ranks restarted: {set(runs)}"
    for name, seen in runs.items():
        rank, restart = name.split("-")
        assert seen["RANK"] == seen["LOCAL_RANK"] == rank and seen["WORLD_SIZE"] == "2", "torchrun-env"
        assert seen["MASTER_ADDR"] and seen["MASTER_PORT"], "torchrun-env, torchrun-standalone"
        assert seen["CUDA_VISIBLE_DEVICES"] is None, "torchrun-env: device visibility left alone"
        assert seen["TORCHELASTIC_RESTART_COUNT"] == restart, "launch-failure-restart"


# ---------------------------------------------------------------- one 2-rank gloo run


def _logging_hook(log: list[Any], index: dict[int, int], first: torch.Tensor) -> Any:
    # unannotated: DDP checks a hook's annotations, and this module's are strings
    def hook(state, bucket):
        log.append([index[id(p)] for p in bucket.parameters()])
        buffer = bucket.buffer() / dist.get_world_size()
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda f: f.value()[0])

    return hook


def _ddp_facts(rank: int) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))
    marker = torch.tensor(float(rank))
    model.register_buffer("marker", marker)
    ddp = DDP(model)
    facts["bucket_bytes_cap"] = ddp.bucket_bytes_cap
    facts["params"] = [p.detach().sum().item() for p in model.parameters()]
    facts["marker_after_construction"] = marker.item()
    facts["keys"] = sorted(ddp.state_dict())[:2]
    marker.fill_(float(rank))
    # buckets of 1 MB: each 512 x 512 fp32 weight fills one
    small = DDP(
        torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 512)),
        bucket_cap_mb=1,
    )
    order: list[Any] = []
    index = {id(p): i for i, p in enumerate(small.parameters())}
    first = small.module[0].weight
    small.module[0].weight.register_hook(lambda grad: order.append("first layer's gradient"))
    small.register_comm_hook(None, _logging_hook(order, index, first))
    x = torch.full((2, 512), float(rank + 1))
    small(x).sum().backward()  # the first iteration runs one bucket, then DDP rebuilds them in ready order
    order.clear()
    small(x).sum().backward()
    facts["bucket_order"] = order
    # gradient average, buffer broadcast at forward
    ddp(x).sum().backward()
    facts["marker_after_forward"] = marker.item()
    facts["grad"] = _row(model)
    model.zero_grad()
    model(x).sum().backward()
    facts["unwrapped_grad"] = _row(model)
    # no_sync: count reductions
    model.zero_grad()
    calls: list[Any] = []
    counted = DDP(model)
    counted.register_comm_hook(None, _logging_hook(calls, {id(p): i for i, p in enumerate(model.parameters())}, first))
    for _ in range(2):
        with counted.no_sync():
            counted(x).sum().backward()
    facts["no_sync_calls"], facts["no_sync_grad"] = len(calls), _row(model)
    counted(x).sum().backward()
    facts["synced_calls"], facts["synced_grad"] = len(calls), _row(model)
    facts["calls_per_backward"] = []
    for _ in range(2):
        before = len(calls)
        counted(x).sum().backward()
        facts["calls_per_backward"].append(len(calls) - before)
    facts.update(_unused_facts(rank))
    return facts


class _Branches(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) if x.sum() > 0 else self.b(x)


def _unused_facts(rank: int) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    ddp = DDP(_Branches())
    ddp(torch.ones(1, 2)).sum().backward()
    try:
        ddp(torch.ones(1, 2))
        facts["unused_error"] = ""
    except RuntimeError as error:
        facts["unused_error"] = str(error)[:200]
    found = DDP(_Branches(), find_unused_parameters=True)
    found(torch.ones(1, 2)).sum().backward()
    found(torch.ones(1, 2)).sum().backward()
    facts["unused_grad_is_none"] = found.module.b.weight.grad is None
    static = DDP(_Branches(), static_graph=True)
    for _ in range(3):
        static(torch.ones(1, 2)).sum().backward()
    facts["static_graph_ran"] = True
    return facts


def _fsdp_facts(rank: int, out: Path) -> dict[str, Any]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    facts: dict[str, Any] = {}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 5))
    before = [id(p) for p in model.parameters()]
    old_optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: dict[str, Any] = {}
    model[0].register_forward_hook(
        lambda m, i, o: seen.update(shape=list(m.weight.shape), dtype=str(m.weight.dtype), dt=type(m.weight).__name__)
    )
    fully_shard(model[0], mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))  # the root after its block
    facts["replaced"] = not set(before) & {id(p) for p in model.parameters()}
    facts["old_optimizer_params"] = sum(p.numel() for g in old_optimizer.param_groups for p in g["params"])
    weight = model[0].weight
    assert isinstance(weight, DTensor)
    facts["mesh_size"] = weight.device_mesh.size()
    facts["placements"] = str(tuple(weight.placements))
    facts["local_rows"] = weight.to_local().shape[0]
    facts["stored_dtype"] = str(weight.to_local().dtype)
    model(torch.randn(2, 3)).sum().backward()
    facts["in_forward"] = seen
    facts["after_forward"] = type(model[0].weight).__name__
    full = cast(
        dict[str, torch.Tensor],
        get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)),
    )
    facts["full"] = {k: [list(v.shape), str(v.device)] for k, v in full.items()}
    facts["full_weight"] = full["0.weight"].tolist() if rank == 0 else None
    facts["plain_state_dict"] = type(model.state_dict()["0.weight"]).__name__
    model.zero_grad()  # as on a resume: a fresh model, no gradients yet
    optimizer = torch.optim.AdamW(model.parameters())
    facts["optimizer_state_before_step"] = len(optimizer.state_dict()["state"])
    _, optim_state = get_state_dict(model, optimizer)
    facts["named_optimizer_state"] = sorted(optim_state["state"])
    dcp.save(get_model_state_dict(model), checkpoint_id=str(out / "dcp"))
    dist.barrier()
    facts["dcp_files"] = sorted(p.name for p in (out / "dcp").iterdir())
    # a root wrap alone runs; no mesh: all W ranks
    alone = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    fully_shard(alone)
    alone(torch.randn(1, 4)).sum().backward()
    facts["root_only_ran"] = True
    # the mesh layout, and TP after FSDP
    facts["dp_coordinate"] = {}
    for shape in ((1, 2), (2, 1)):
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
        facts["dp_coordinate"][str(shape)] = mesh["dp"].get_local_rank()
    mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
    block = torch.nn.Sequential(torch.nn.Linear(4, 4))
    fully_shard(block, mesh=mesh["dp"])
    try:
        parallelize_module(block, mesh["tp"], {"0": ColwiseParallel()})
        facts["tp_after_fsdp"] = ""
    except Exception as error:  # noqa: BLE001 - any exception: its message is the fact
        facts["tp_after_fsdp"] = str(error)[:300]
    return facts


def _hang_facts(rank: int) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    short = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=2))
    start = time.monotonic()
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(1), group=short)
            facts["lonely"] = "returned"
        except Exception as error:  # noqa: BLE001 - gloo raises RuntimeError or DistBackendError
            facts["lonely"] = f"{type(error).__name__}: {str(error)[:200]}"
    facts["lonely_s"] = time.monotonic() - start
    dist.barrier()
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    dist.set_debug_level_from_env()
    checked = dist.new_group(backend="gloo")
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(2), group=checked)
        else:
            dist.broadcast(torch.ones(2), src=0, group=checked)
        facts["mismatch"] = ""
    except Exception as error:  # noqa: BLE001
        facts["mismatch"] = str(error)[:400]
    dist.set_debug_level(dist.DebugLevel.OFF)
    del os.environ["TORCH_DISTRIBUTED_DEBUG"]
    dist.barrier()
    return facts


def _two_ranks(rank: int, port: int, out: str) -> None:
    facts: dict[str, Any] = {"RANK_before_init": os.environ.get("RANK"), "out": out}
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK=str(rank), WORLD_SIZE="2")
    os.environ.pop("MASTER_PORT", None)
    try:
        dist.init_process_group("gloo", timeout=TIMEOUT)
        facts["no_port"] = ""
    except ValueError as error:
        facts["no_port"] = str(error)
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", timeout=TIMEOUT)
    facts["rank"], facts["world"] = dist.get_rank(), dist.get_world_size()
    cpu = torch.tensor([float(rank + 1)])
    dist.all_reduce(cpu)
    facts["all_reduce"] = cpu.item()
    facts.update(_ddp_facts(rank))
    facts.update(_fsdp_facts(rank, Path(out)))
    facts.update(_hang_facts(rank))
    dist.destroy_process_group()
    facts["initialized_after_destroy"] = dist.is_initialized()
    Path(out, f"rank{rank}.json").write_text(json.dumps(facts))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("banks")
    mp.spawn(_two_ranks, args=(_free_port(), str(out)), nprocs=2, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_process_group_from_the_environment(ranks: list[dict[str, Any]]) -> None:
    for rank, facts in enumerate(ranks):
        assert facts["RANK_before_init"] is None, "launch-spawn-args: spawn sets no RANK"
        assert "MASTER_PORT" in facts["no_port"], "pg-env-rendezvous: env:// reads MASTER_PORT"
        assert (facts["rank"], facts["world"]) == (rank, 2), "pg-rank-world, torchrun-init, launch-spawn-args"
        assert facts["all_reduce"] == 3.0, "pg-backend: gloo sums CPU tensors (all_reduce's default op)"
        assert facts["initialized_after_destroy"] is False, "pg-cleanup"


def test_ddp_construction_averaging_and_buffers(ranks: list[dict[str, Any]]) -> None:
    zero, one = ranks
    assert zero["bucket_bytes_cap"] == 25 * 1024 * 1024, "ddp-bucketing, overlap-ddp-bucket-cap: 25 MB"
    assert zero["params"] == one["params"], "ddp-broadcast-construction: rank 0's parameters"
    assert zero["marker_after_construction"] == one["marker_after_construction"] == 0.0, "ddp-broadcast-construction"
    assert one["marker_after_forward"] == 0.0, "ddp-no-weight-broadcast: buffers re-broadcast at forward"
    assert zero["grad"] == one["grad"], "ddp-gradient-average"
    local = [zero["unwrapped_grad"], one["unwrapped_grad"]]
    assert local[0] != local[1], "ddp-forward-unwrapped: gradients stay local, no error"
    assert zero["grad"] == pytest.approx([(a + b) / 2 for a, b in zip(*local)]), (
        "ddp-gradient-average: the mean; ddp-loss-sum: a division by W and nothing more"
    )
    assert zero["keys"][0].startswith("module."), "ckpt-module-prefix"
    assert "forward_sync_buffers" in explanation_of("ddp-no-weight-broadcast")


def explanation_of(qid: str) -> str:
    return str(question(qid).explanation)


def test_ddp_buckets_follow_the_backward(ranks: list[dict[str, Any]]) -> None:
    order = ranks[0]["bucket_order"]
    buckets = [b for b in order if isinstance(b, list)]
    assert len(buckets) > 1 and [i for b in buckets for i in sorted(b, reverse=True)] == [5, 4, 3, 2, 1, 0], (
        f"ddp-bucket-order: reversed parameters: {order}"
    )
    assert order.index("first layer's gradient") > order.index(buckets[0]), "ddp-overlap: starts during backward"


def test_no_sync(ranks: list[dict[str, Any]]) -> None:
    zero, one = ranks
    assert zero["no_sync_calls"] == 0 and zero["no_sync_grad"] != one["no_sync_grad"], "nosync-what, nosync-last-step"
    assert zero["synced_calls"] >= 1 and zero["synced_grad"] == one["synced_grad"], "nosync-what"
    sums = [3 * g / 2 for g in zero["no_sync_grad"]], [3 * g / 2 for g in one["no_sync_grad"]]
    assert zero["synced_grad"] == pytest.approx([(a + b) / 2 for a, b in zip(*sums)]), (
        "nosync-what: the synced backward reduces everything accumulated; nosync-loss-scale: the gradients of "
        "the k backward calls add up, and DDP averages them over the ranks"
    )
    assert all(n >= 1 for n in zero["calls_per_backward"]), "nosync-traffic: every backward outside no_sync reduces"


def test_unused_parameters(ranks: list[dict[str, Any]]) -> None:
    assert "finished reduction" in ranks[0]["unused_error"], f"unused-params-hang: {ranks[0]['unused_error']}"
    assert ranks[0]["unused_grad_is_none"], "unused-params-flags: unused parameters get no gradient"
    assert ranks[0]["static_graph_ran"], "unused-params-flags"


def test_fsdp(ranks: list[dict[str, Any]], tmp_path: Path) -> None:
    zero, one = ranks
    assert zero["replaced"] and zero["old_optimizer_params"] == 3 * 5 + 5 + 5 * 5 + 5, (
        "fsdp-optimizer-order, dcp-shard-then-load: an optimizer built before fully_shard holds the old tensors"
    )
    assert zero["mesh_size"] == 2 and zero["placements"] == "(Shard(dim=0),)", "fsdp-shard-elements, fsdptp-no-mesh"
    assert (zero["local_rows"], one["local_rows"]) == (3, 2), "fsdp-shard-elements: ceil(5 / 2) rows on rank 0"
    assert zero["stored_dtype"] == "torch.float32", "mp-fp32-shard-bytes"
    assert zero["in_forward"] == {"shape": [5, 3], "dtype": "torch.bfloat16", "dt": "Parameter"} or zero["in_forward"][
        "shape"
    ] == [5, 3], f"fsdp-unit: {zero['in_forward']}"
    assert zero["in_forward"]["dtype"] == "torch.bfloat16", "mp-fsdp-bytes-per-rank: gathered in bf16"
    assert zero["after_forward"] == "DTensor", "fsdp-unit: resharded after forward"
    assert zero["full"]["0.weight"] == [[5, 3], "cpu"], "fsdp-full-state-dict"
    assert zero["plain_state_dict"] == "DTensor", "fsdp-full-state-dict: a plain state_dict holds shards"
    assert zero["optimizer_state_before_step"] == 0, "dcp-state-dict-api: empty before the first step"
    assert zero["named_optimizer_state"] == ["0.bias", "0.weight", "1.bias", "1.weight"], "dcp-state-dict-api"
    assert zero["dcp_files"] == [".metadata", "__0_0.distcp", "__1_0.distcp"], "dcp-file-count"
    assert zero["root_only_ran"], "fsdp-wrap-blocks"
    assert [r["dp_coordinate"] for r in ranks] == [{"(1, 2)": 0, "(2, 1)": 0}, {"(1, 2)": 0, "(2, 1)": 1}], (
        "fsdptp-dp-coordinate: row r // T"
    )
    assert "Cannot distribute a DTensor with device mesh" in zero["tp_after_fsdp"], "fsdptp-order"
    assert "Cannot distribute a DTensor with device mesh" in explanation_of_option("fsdptp-order", 0)


def explanation_of_option(qid: str, option: int) -> str:
    return str(question(qid).options[option].explanation)


def test_dcp_checkpoint_of_two_ranks_loads_in_one_process(ranks: list[dict[str, Any]]) -> None:
    import torch.distributed.checkpoint as dcp

    state = {"0.weight": torch.zeros(5, 3)}
    dcp.load(state, checkpoint_id=str(Path(ranks[0]["out"]) / "dcp"), no_dist=True)
    assert state["0.weight"].tolist() == ranks[0]["full_weight"], "dcp-load-other-world-size: resharded at load"


def test_hangs(ranks: list[dict[str, Any]]) -> None:
    zero, one = ranks
    assert zero["lonely"] != "returned" and zero["lonely_s"] >= 1.5, f"hang-mismatched-collective: {zero['lonely']}"
    assert zero["lonely_s"] < 30, "hang-timeout: the group's timeout bounds it"
    for facts in ranks:
        assert "mismatch" in facts["mismatch"].lower(), f"hang-debug-detail: {facts['mismatch']}"
