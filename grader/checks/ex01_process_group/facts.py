"""What exercise 1's workers report: imported by workers.py (rank side) and checks.py (judge side)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

import numpy as np

from grader.engine.facts import RankFacts, Worker


class InitCall(TypedDict):
    """The arguments of one dist.init_process_group call, and the rendezvous address it met at."""

    backend: str | None
    init_method: Any  # whatever the student passed: judged only where it is a string
    rank: Any
    world_size: Any
    store_port: Any  # a TCPStore's port, where one was passed
    master_addr: str | None
    master_port: str | None


class Group(TypedDict):
    rank: int
    world_size: int
    backend: str
    backend_config: str


class Joined(RankFacts):
    """setup_ddp, two collectives, cleanup_ddp (`join_and_leave`)."""

    grader_port: str
    init_calls: list[InitCall]
    device_bindings: dict[str, list[dict[str, Any]]]
    initialized: bool
    group: NotRequired[Group]
    all_reduce: NotRequired[np.ndarray]
    broadcast: NotRequired[np.ndarray]
    initialized_after_cleanup: bool


class OnGpuNode(RankFacts):
    """setup_ddp on a simulated node of GPUs (`simulated_gpu_node`): every device event, in order."""

    events: list[dict[str, Any]]
    gpus_per_node: int
    local_rank: int


JOIN_AND_LEAVE = Worker("join_and_leave", Joined)
SIMULATED_GPU_NODE = Worker("simulated_gpu_node", OnGpuNode)
