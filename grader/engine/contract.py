"""What every launcher of ranks and every caller of one share: the job, the spec a rank starts from,
the result, and the `Runner` protocol the checks run jobs through.

The launchers (the zygote or portable-pool `Engine` in supervisor.py, `TorchrunEngine` in
torchrun_launch.py) implement it; the checks, the batch (whose per-submission time budget wraps an
engine) and the sandboxes (which supply a `Confinement`) depend on this module alone, never on one
launcher's internals.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict

OUTPUT_HEAD = OUTPUT_TAIL = 16 * 1024  # bytes of a rank's output kept from its start and from its end
STACK_DUMP_CHARS = 20000  # of a rank's stack dumps, the last ones, kept in its outcome
STACK_DUMP_BYTES = 4 * STACK_DUMP_CHARS  # held while a run goes on: up to 4 bytes a character


def read_tail(path: Path, size: int) -> bytes:
    """The last `size` bytes of a file a rank wrote (the rest is never read: it may be huge)."""
    with open(path, "rb") as file:
        file.seek(max(0, os.fstat(file.fileno()).st_size - size))
        return file.read(size)


DEFAULT_DEADLINE_S = 30.0  # seconds a run may take before its ranks are stopped, unless told otherwise


class EngineError(RuntimeError):
    """The engine itself failed (not the code under test)."""


class Confinement(Protocol):
    """Where the zygote runs: a sandbox that wraps its command line (see grader/sandbox)."""

    scratch_root: str  # the folder ranks write in, as the ranks see it

    def command(self, argv: list[str]) -> list[str]: ...

    def environment(self, base: dict[str, str]) -> dict[str, str]: ...

    def close(self) -> None: ...

    def oom_kills(self) -> int:
        """Processes the kernel has killed so far for exceeding the sandbox's memory limit."""
        ...


class RankSpec(TypedDict):
    """What `rank_runtime.run_rank` starts a rank from; sent as JSON, so plain values only.

    `Job.rank_spec` writes the job's part; the launcher adds the rest before the rank starts.
    """

    world_size: int
    backend: str
    target: str  # "module:function", called with the rank's context and `kwargs`
    kwargs: dict[str, Any]
    student_file: str | None
    env: dict[str, str]  # set in the rank's environment before anything runs
    collective_timeout: float  # seconds
    debug_collectives: bool
    rank: NotRequired[int]  # from the launcher (supervisor, or torchrun's RANK)
    run_dir: NotRequired[str]  # the run's own folder, made by the zygote, the pool or the torchrun engine
    host_store: NotRequired[bool]  # rank 0 hosts the env:// store (no MASTER_PORT in the job)
    local_rank: NotRequired[int]  # the GPU index, under torchrun; else the rank
    init_method: NotRequired[str | None]  # torchrun across nodes: "env://"; else the run folder's file store


@dataclass(frozen=True)
class Job:
    """One run: `target` ("module:function") called on each of `world_size` fresh ranks."""

    target: str
    world_size: int
    kwargs: dict[str, Any] = field(default_factory=dict)
    student_file: Path | None = None
    backend: str = "gloo"
    deadline: float = DEFAULT_DEADLINE_S
    env: dict[str, str] = field(default_factory=dict)
    # TORCH_DISTRIBUTED_DEBUG=DETAIL: mismatched collectives fail at once instead of hanging.
    # Off for DDP: in torch 2.13 DDP over the DETAIL wrapper process group segfaults.
    debug_collectives: bool = True
    scratch: str = ""  # a folder shared by the runs of one grading (files checks pass between runs)

    def rank_spec(self, env: dict[str, str]) -> RankSpec:
        """What `rank_runtime.run_rank` needs, less the rank and its run folder (the launcher adds them)."""
        return {
            "world_size": self.world_size,
            "backend": self.backend,
            "target": self.target,
            "kwargs": self.kwargs,
            "student_file": str(self.student_file.resolve()) if self.student_file else None,
            "env": env,
            "collective_timeout": max(2.0, self.deadline - 2.0),
            "debug_collectives": self.debug_collectives,
        }


class CappedOutput:
    """Keeps the first and last bytes of a stream and counts what it dropped in between: whatever a
    rank prints, the grader holds at most OUTPUT_HEAD + OUTPUT_TAIL bytes of it."""

    def __init__(self, head: int = OUTPUT_HEAD, tail: int = OUTPUT_TAIL) -> None:
        self._head_limit, self._tail_limit = head, tail
        self._head = bytearray()
        self._tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        """Take a chunk of the stream; what it holds stays within head + tail + the chunk."""
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        self._tail += data
        excess = len(self._tail) - self._tail_limit
        if excess > 0:
            del self._tail[:excess]
            self.dropped += excess

    def add_file(self, path: Path) -> None:
        """A rank's output file, as if streamed: only its head and tail are read (it may be huge)."""
        with open(path, "rb") as file:
            self.add(file.read(self._head_limit))
            skipped = os.fstat(file.fileno()).st_size - file.tell() - self._tail_limit
            if skipped > 0:
                file.seek(skipped, os.SEEK_CUR)
                self.dropped += skipped
            self.add(file.read(self._tail_limit))

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes of output not shown ...]\n" if self.dropped else ""
        return bytes(self._head).decode(errors="replace") + middle + bytes(self._tail).decode(errors="replace")


@dataclass
class RankOutcome:
    """Everything known about one rank after its run: raw facts, no judgement."""

    rank: int
    pid: int = 0  # as the zygote sees it (in a sandbox, not a PID of the grader's)
    report: dict[str, Any] | None = None
    report_problem: str = ""
    status: int | None = None  # exit code, or -signal; None if it was never seen to exit
    output: str = ""
    output_dropped: int = 0
    stack_dump: str = ""
    stopped: str = ""  # "deadline" or "peer failure" when the grader had it killed

    @property
    def facts(self) -> dict[str, Any]:
        return (self.report or {}).get("facts") or {}

    @property
    def error(self) -> dict[str, Any] | None:
        return (self.report or {}).get("error")

    @property
    def ok(self) -> bool:
        return self.report is not None and self.error is None


@dataclass(frozen=True)
class StrayProcess:
    """A process the run's code left running when its ranks had exited; it was killed."""

    pid: int
    command: str
    origin: str = ""  # where the student's code started it, when known


@dataclass
class RunResult:
    job: Job
    ranks: list[RankOutcome]
    seconds: float
    timed_out: bool
    strays: list[StrayProcess] = field(default_factory=list)
    stray_count: int = 0  # all of them, where `strays` lists at most the first fifty
    memory_exceeded: bool = False  # the sandbox's memory limit killed a process during the run
    queued: float = 0.0  # seconds it waited for its ranks to start (a portable pool warming interpreters)

    @property
    def ok(self) -> bool:
        return all(rank.ok for rank in self.ranks)


class Runner(Protocol):
    """What grading needs of an engine: runs, and a scratch folder the runs of one grading share.

    Met by `Engine`, `TorchrunEngine` and the batch's time budget around an engine, so checks never
    depend on which one starts their ranks. `run` raises EngineError when the engine itself failed.
    """

    def run(self, job: Job) -> RunResult: ...

    def new_scratch(self) -> str: ...

    def discard_scratch(self, path: str) -> None: ...
