"""Judging exercise 1 from what the ranks recorded (signatures: docs/maintainers/DIAGNOSES.md)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from grader.checks.ex01_process_group.facts import JOIN_AND_LEAVE, SIMULATED_GPU_NODE, Joined, OnGpuNode
from grader.engine import RunResult
from grader.engine.rank_runtime import RENDEZVOUS_RANKS
from grader.judge.api import CheckContext, check
from grader.judge.explain import error_messages
from grader.judge.names import HintName


def _port_overridden(facts: Joined) -> str | None:
    grader_port = facts.get("grader_port")
    for call in facts.get("init_calls", []):
        init_method = str(call.get("init_method") or "")
        if call.get("store_port") is not None:
            if str(call["store_port"]) != grader_port:
                return f"the TCPStore passed to init_process_group listens on port {call['store_port']}"
        elif init_method.startswith("tcp://"):
            try:
                port = urlparse(init_method).port
            except ValueError:
                port = None
            if str(port) != grader_port:
                return f"init_method={init_method!r} uses port {port}"
        elif init_method in ("", "env://") and call.get("master_port") != grader_port:
            return (
                f"MASTER_PORT was {call.get('master_port')} at init_process_group, not the {grader_port} "
                "the launcher set"
            )
        elif init_method not in ("", "env://"):
            return f"init_method={init_method!r} meets elsewhere than at MASTER_ADDR:MASTER_PORT"
    return None


def _backends(config: str) -> dict[str, str]:
    """ "cpu:gloo,cuda:nccl" (dist.get_backend_config()) as {"cpu": "gloo", "cuda": "nccl"}."""
    pairs = [item.split(":", 1) for item in config.split(",") if ":" in item]
    return {device.strip(): backend.strip() for device, backend in pairs}


def _named_init_mistake(ctx: CheckContext, rank: int, facts: Joined) -> None:
    """Raise the failure a rank's init_process_group arguments show, if they show one."""
    overridden = _port_overridden(facts)
    if overridden:
        raise ctx.fail(
            f"hard-coded rendezvous on rank {rank}: {overridden}. setup_ddp must take "
            "MASTER_ADDR/MASTER_PORT from the environment (a fixed port collides when two jobs share "
            "a machine)",
            hint=HintName("launcher_sets_address"),
        )
    calls = facts.get("init_calls", [])
    backends = {call.get("backend") or "" for call in calls}
    if ctx.backend == "gloo" and any("nccl" in backend for backend in backends):
        raise ctx.fail(
            f"rank {rank} asked for the nccl backend on a machine without a GPU: NCCL needs GPUs; "
            "choose gloo when torch.cuda.is_available() is False",
            hint=HintName("backend_choice"),
        )
    bound = [api for api, made in facts.get("device_bindings", {}).items() if made]
    if ctx.backend == "gloo" and bound:
        raise ctx.fail(
            f"rank {rank} called {bound[0]}() on a machine without a GPU, with the gloo backend: bind "
            "a GPU only under nccl",
            hint=HintName("local_rank_gpu"),
        )
    for call in calls[:1]:
        if call.get("rank") is not None and call["rank"] != rank:
            raise ctx.fail(
                f"wrong rank: the process given rank={rank} called init_process_group(rank="
                f"{call['rank']}); pass setup_ddp's rank through"
            )
        if call.get("world_size") is not None and call["world_size"] != ctx.world_size:
            raise ctx.fail(
                f"wrong world size: init_process_group(world_size={call['world_size']}) in a group of "
                f"{ctx.world_size} processes; pass setup_ddp's world_size through"
            )


def _rank_from_environment(result: RunResult) -> bool:
    """env:// asked for RANK or WORLD_SIZE, which this launcher passes as arguments instead."""
    for outcome in result.ranks:
        message = error_messages(outcome.error)
        if "env:// rendezvous" in message and ("RANK" in message or "WORLD_SIZE" in message):
            return True
    return False


def _collective_inputs(ctx: CheckContext) -> dict[str, list[int]]:
    """What each rank all-reduces, and offers to broadcast, drawn per grading: whole numbers (exact in
    float32), distinct, so that the right sum and the right source are the only way to the answers."""
    draw = ctx.draw(f"collectives at W={ctx.world_size}")
    return {
        "summands": draw.sample(range(1, 10**5), ctx.world_size),
        "broadcast": draw.sample(range(1, 10**5), ctx.world_size),
    }


def _joined(ctx: CheckContext) -> list[Joined]:
    """The shared run, with the named mistakes checked before any generic failure."""
    inputs = _collective_inputs(ctx)
    result = ctx.run(JOIN_AND_LEAVE.name, summands=inputs["summands"], broadcast=inputs["broadcast"])
    for outcome in result.ranks:
        _named_init_mistake(ctx, outcome.rank, ctx.conform(outcome.facts, Joined, outcome.rank, outcome.ok))
    if _rank_from_environment(result):
        raise ctx.fail(
            "init_process_group looked for RANK/WORLD_SIZE in the environment (env:// without rank= "
            "and world_size=); a launcher like mp.spawn passes them as arguments: "
            "init_process_group(backend, rank=rank, world_size=world_size)"
        )
    ranks: list[Joined] = ctx.require(result, schema=Joined)
    if not all(f.get("init_calls") for f in ranks):
        raise ctx.fail("setup_ddp returned without calling dist.init_process_group")
    return ranks


def _store_saw(ctx: CheckContext, facts: Joined) -> None:
    """Under Gloo, the store the grader hosts for the launcher's rendezvous (MASTER_ADDR:MASTER_PORT)
    sees every rank's group publish its address: its own observation, beside what the ranks report."""
    seen = facts.get(RENDEZVOUS_RANKS)
    if ctx.backend != "gloo" or seen is None or seen == list(range(ctx.world_size)):
        return
    raise ctx.fail(
        f"the launcher's rendezvous store (MASTER_ADDR:MASTER_PORT) saw ranks {seen} form their group, "
        f"not ranks 0..{ctx.world_size - 1}: every rank must join through it (init_process_group with "
        "env://, its default, or tcp:// to that address)",
        hint=HintName("launcher_sets_address"),
    )


@check("joins_group")
def joins_group(ctx: CheckContext) -> None:
    ranks = _joined(ctx)
    _store_saw(ctx, ranks[0])
    for rank, facts in enumerate(ranks):
        group = facts.get("group")
        if not facts.get("initialized") or group is None:
            raise ctx.fail(f"after setup_ddp, rank {rank} is not in a process group")
        wrong = [
            f"{key} {got!r} (expected {want!r})"
            for key, got, want in (("rank", group["rank"], rank), ("world_size", group["world_size"], ctx.world_size))
            if got != want
        ]
        device = "cuda" if ctx.backend == "nccl" else "cpu"
        chosen = _backends(group.get("backend_config", "")).get(device)
        if chosen != ctx.backend:
            wrong.append(f"backend {chosen or group['backend']!r} for {device} tensors (expected {ctx.backend!r})")
        if wrong:
            raise ctx.fail(f"process {rank} joined with {', '.join(wrong)}")


@check("collectives_work")
def collectives_work(ctx: CheckContext) -> None:
    inputs = _collective_inputs(ctx)
    expected_sum, source = sum(inputs["summands"]), ctx.world_size - 1
    for rank, facts in enumerate(_joined(ctx)):
        got_sum = float(facts["all_reduce"][0])
        if got_sum != expected_sum:
            raise ctx.fail(
                f"all_reduce of the ranks' values {inputs['summands']} gave {got_sum:g} on rank {rank}, "
                f"expected their sum {expected_sum:g}: are the ranks in one group with the right world "
                "size?"
            )
        got = float(facts["broadcast"][0])
        if got != inputs["broadcast"][source]:
            raise ctx.fail(
                f"broadcast from the last rank gave {got:g} on rank {rank}, expected that rank's "
                f"{inputs['broadcast'][source]:g}"
            )


def _gpu_used(events: list[dict[str, Any]]) -> tuple[int | None, str]:
    """The GPU a rank's NCCL group would use, and what decided it: the device_id given to
    init_process_group, else the GPU bound when the group was first used (its first collective)."""
    for event in events:
        if event["call"] == "init_process_group" and event.get("device_id_index") is not None:
            return event["device_id_index"], "init_process_group(device_id=...)"
    first_use = next((e for e in events if e["call"] not in ("set_device", "init_process_group")), None)
    if first_use is None:
        return None, ""
    use = (
        "the grader's first collective after setup_ddp"
        if first_use["call"] == "setup_ddp returned"
        else f"its first collective, {first_use['call']}() in setup_ddp"
    )
    return first_use["device"], use


def _judge_gpu(ctx: CheckContext, rank: int, facts: OnGpuNode, raised: bool) -> None:
    events, local, gpus = facts["events"], facts["local_rank"], facts["gpus_per_node"]
    place = f"rank {rank} (LOCAL_RANK {local} on a node of {gpus} GPU{'s' if gpus > 1 else ''})"
    bindings = [e for e in events if e["call"] == "set_device"]
    attempted = [e["device"] for e in bindings]
    if rank != local and rank in attempted and local not in attempted:
        raise ctx.fail(
            f"RANK used where LOCAL_RANK is needed: {place} bound GPU {rank}; GPUs are numbered per "
            "node: use int(os.environ['LOCAL_RANK']) (or rank % torch.cuda.device_count())",
            hint=HintName("local_rank_gpu"),
        )
    if raised:
        return  # the rank's own error is the story: told by the generic failure below
    used, decided_by = _gpu_used(events)
    if used == local:
        return
    if not bindings:
        raise ctx.fail(
            f"set_device missing under nccl: {place} never bound its GPU, so every rank of a node uses "
            "GPU 0; call torch.cuda.set_device(local_rank) (or torch.accelerator.set_device_index)",
            hint=HintName("local_rank_gpu"),
        )
    if local in attempted:
        raise ctx.fail(
            f"{place} bound GPU {local} only after {decided_by}, which ran on GPU {used}: bind the GPU "
            "before the group is first used",
            hint=HintName("local_rank_gpu"),
        )
    raise ctx.fail(
        f"{place} used GPU {used} for {decided_by}; expected GPU {local}, its LOCAL_RANK (it bound {attempted})",
        hint=HintName("local_rank_gpu"),
    )


@check("nccl_setup")
def nccl_setup(ctx: CheckContext) -> None:
    result = ctx.run(SIMULATED_GPU_NODE.name)
    for outcome in result.ranks:
        facts, rank = ctx.conform(outcome.facts, OnGpuNode, outcome.rank, complete=False), outcome.rank
        if "events" not in facts:
            continue  # the stub, or a crash before anything ran: the generic failure says which
        inits = [e for e in facts["events"] if e["call"] == "init_process_group"]
        backend = inits[0]["backend"] if inits else None
        if inits and backend is not None and "nccl" not in backend:
            raise ctx.fail(
                f"on a GPU node setup_ddp chose {backend!r} when no backend was given; default to nccl "
                "when a GPU is available (torch.cuda.is_available(), or "
                "dist.get_default_backend_for_device(...))",
                hint=HintName("backend_choice"),
            )
        _judge_gpu(ctx, rank, facts, raised=outcome.error is not None)
    for gpu_facts in ctx.require(result, "on a simulated GPU node", schema=OnGpuNode):
        if not any(e["call"] == "init_process_group" for e in gpu_facts["events"]):
            raise ctx.fail("setup_ddp did not call dist.init_process_group")


@check("cleans_up")
def cleans_up(ctx: CheckContext) -> None:
    for rank, facts in enumerate(_joined(ctx)):
        if facts.get("initialized_after_cleanup"):
            raise ctx.fail(
                f"no destroy: after cleanup_ddp rank {rank} is still in a process group; "
                "call dist.destroy_process_group()",
                hint=HintName("destroy_group"),
            )
