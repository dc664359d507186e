"""What exercise 7's workers report: imported by checks.py (judge side); runs on the rank side too.

The `torchrun` worker is one process that launches the student's script; each process of the launch
records its own facts (shim.py), which the worker hands on as `processes`.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from grader.engine.facts import RankFacts, Worker


class Env(TypedDict):
    """The variables torchrun set for a process (shim.TORCHRUN_VARIABLES): the judge reads them all."""

    RANK: str
    LOCAL_RANK: str
    WORLD_SIZE: str
    LOCAL_WORLD_SIZE: str
    GROUP_RANK: str


class Group(TypedDict):
    rank: int
    world_size: int


class InitCall(TypedDict):
    """One dist.init_process_group call: its arguments as plain values (an int or a str; another value's repr)."""

    backend: int | str | None
    init_method: int | str | None
    rank: int | str | None
    world_size: int | str | None
    group: NotRequired[Group]  # the group it formed, once it returned


class Start(TypedDict):
    """The weights the first optimizer step started from, flattened, per parameter."""

    values: list[list[float]]
    shapes: list[list[int]]


class Step(TypedDict):
    """One optimizer step: the gradients it used and the weights after it, flattened, per parameter."""

    grads: list[list[float]]
    params: NotRequired[list[list[float]]]  # absent where the step itself never ended


class Query(TypedDict):
    """One question to the simulated GPU node: which GPU is bound."""

    call: str
    api: str
    answer: int
    after_bind: bool


class Process(TypedDict):
    """What one process of the launch recorded (shim.Facts), and its stacks if it was asked for them."""

    env: Env
    pid: int
    printed: str  # what the script itself printed or logged, on stdout and stderr
    init_calls: list[InitCall]
    start: Start | None
    steps: list[Step]
    device: str | None  # what pick_device() returned on a node of simulated GPUs
    error: dict[str, Any] | None  # a rank error as grader.engine.rank_runtime reports one, and its stage
    destroy_calls: int
    initialized_at_end: bool | None
    script_finished: bool
    ended: NotRequired[bool]  # recorded last: every fact of this process was recorded (shim.run)
    set_device: NotRequired[list[int | None]]  # the GPUs pick_device() bound (None: not a GPU)
    queried: NotRequired[list[Query]]
    bound: NotRequired[int]  # the GPU bound when pick_device() returned
    stack: str  # its Python stacks, where the launch did not finish


class Torchrun(RankFacts):
    """The student's script launched by torchrun on two simulated nodes (`torchrun`)."""

    commands: list[str]  # each node's torchrun command line
    seconds: float
    timed_out: bool
    exit_codes: list[int | None]  # each agent's; None for an agent stopped at the timeout
    agent_output: list[str]
    processes: list[Process]  # in rank order


class ReferenceStep(TypedDict):
    grads: list[list[float]]
    params: list[list[float]]


class Reference(RankFacts):
    """Trusted (`reference`): what DDP computes, in one process, from the weights the processes started from."""

    steps: list[ReferenceStep]


TORCHRUN = Worker("torchrun", Torchrun)
REFERENCE = Worker("reference", Reference)
