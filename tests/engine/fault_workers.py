"""Workers that misbehave on purpose, to test how the engine reports each way a rank can fail."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from grader.engine.rank_runtime import RankContext


def healthy(ctx: RankContext) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    ctx.init_group()
    total = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(total)
    return {"sum": total}


def raises(ctx: RankContext) -> None:
    if ctx.rank == 1:
        raise ValueError("planted error on rank 1")
    time.sleep(60)  # the healthy rank must be stopped, not waited for


def hangs(ctx: RankContext, pid_file: str) -> None:
    child = subprocess.Popen(["sleep", "120"])  # must not outlive the run
    Path(pid_file + f".{ctx.rank}").write_text(str(child.pid))
    while True:
        time.sleep(0.05)


def aborts(ctx: RankContext) -> None:
    if ctx.rank == 1:
        os.abort()
    time.sleep(60)


def exits_quietly(ctx: RankContext) -> None:
    os._exit(0)


def calls_sys_exit(ctx: RankContext) -> None:
    sys.exit(0)


def mismatched_collective(ctx: RankContext) -> None:
    import torch
    import torch.distributed as dist

    ctx.init_group()
    dist.all_reduce(torch.zeros(ctx.rank + 1))


def barrier_on_rank_zero_only(ctx: RankContext) -> None:
    """Rank 0 waits in a barrier no other rank calls: the others return."""
    import torch.distributed as dist

    ctx.init_group()
    if ctx.rank == 0:
        dist.barrier()


def all_reduce_against_broadcast(ctx: RankContext) -> None:
    import torch
    import torch.distributed as dist

    ctx.init_group()
    if ctx.rank == 0:
        dist.all_reduce(torch.zeros(4))
    else:
        dist.broadcast(torch.zeros(4), src=0)


def broadcast_from_own_rank(ctx: RankContext) -> None:
    import torch
    import torch.distributed as dist

    ctx.init_group()
    dist.broadcast(torch.zeros(4), src=ctx.rank)


def reduces_after_a_while(ctx: RankContext) -> dict[str, Any]:
    """Correct code: rank 1 reaches the all_reduce 3 s after rank 0, which waits for it."""
    import torch
    import torch.distributed as dist

    ctx.init_group()
    if ctx.rank == 1:
        time.sleep(3)
    total = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(total)
    return {"sum": total}


def floods_output(ctx: RankContext) -> dict[str, Any]:
    line = "x" * 1023 + "\n"
    for _ in range(10 * 1024):
        sys.stdout.write(line)
    return {"done": True}


def kills_the_launcher(ctx: RankContext) -> None:
    os.kill(os.getppid(), 9)
    time.sleep(60)


def leaves_strays(ctx: RankContext, kind: str, pid_dir: str) -> dict[str, Any]:
    """Start a process that escapes the rank's process group, and return without waiting for it."""
    from tests_strays_support import start_stray  # noqa: PLC0415 (the test folder is on the path)

    start_stray(kind, pid_dir)
    return {"done": True}


def intrudes(ctx: RankContext, port: int) -> dict[str, Any]:
    """Connect to the grader's listener as another run would, and with garbage; then report."""
    import socket

    with socket.create_connection(("127.0.0.1", port)) as wrong_token:
        wrong_token.sendall(b"0" * 32 + f"o{ctx.rank:06d}".encode() + b"forged output\n")
        with socket.create_connection(("127.0.0.1", port)) as garbage:
            garbage.sendall(b"GET / HTTP/1.0\r\n\r\n")
            time.sleep(0.2)
    print(f"rank {ctx.rank} says hello")
    return {"rank": ctx.rank}


def leaves_temp_files(ctx: RankContext) -> dict[str, Any]:
    """Make a temporary folder and file the way libraries do (torch's elastic launcher, spawn's
    error files) and never remove them."""
    import tempfile  # noqa: PLC0415

    folder = tempfile.mkdtemp(prefix="left-")
    handle, name = tempfile.mkstemp(prefix="left-")
    os.close(handle)
    return {"folder": folder, "file": name}


def model_to_rank(ctx: RankContext) -> None:
    """`model.to(rank)` on a run without a GPU: torch's error has one meaning here."""
    import torch

    torch.nn.Linear(2, 2).to(ctx.rank)


def dies_while_peer_reduces(ctx: RankContext) -> None:
    """Rank 1 dies (its process gone at once, as a crash would) while rank 0 waits in an all_reduce:
    rank 0's gloo connection breaks, an echo of rank 1's failure."""
    import torch
    import torch.distributed as dist

    ctx.init_group()
    if ctx.rank == 1:
        os._exit(3)
    dist.all_reduce(torch.zeros(4))


def raises_while_peer_reduces(ctx: RankContext) -> None:
    """Rank 1 raises while rank 0 waits in an all_reduce."""
    import torch
    import torch.distributed as dist

    ctx.init_group()
    if ctx.rank == 1:
        raise ValueError("planted error on rank 1")
    dist.all_reduce(torch.zeros(4))


def _runtime_fd(name: str) -> int:
    """One of the rank runtime's descriptors ("stack_fd", "report_fd"), found as student code can: in
    the locals of `run_rank`, up the stack."""
    frame = sys._getframe()
    while name not in frame.f_locals:
        assert frame.f_back is not None, f"no {name} up the stack"
        frame = frame.f_back
    return frame.f_locals[name]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def floods_stacks(ctx: RankContext, megabytes: int) -> None:
    """Write `megabytes` of garbage into the stack-dump pipe, then hang: the dump the grader asks for
    at the deadline comes last and must still name the line."""
    chunk = b"x" * (1 << 20)
    for _ in range(megabytes):
        _write_all(_runtime_fd("stack_fd"), chunk)
    while True:
        time.sleep(0.05)


def sends_an_oversized_report(ctx: RankContext, announced: int, megabytes: int) -> None:
    """A report header that announces `announced` bytes, then `megabytes` of body (more or less)."""
    fd = _runtime_fd("report_fd")
    _write_all(fd, struct.pack("!Q", announced))
    chunk = b" " * (1 << 20)
    for _ in range(megabytes):
        _write_all(fd, chunk)
    os._exit(0)


def sends_an_expanding_report(ctx: RankContext, values: int) -> dict[str, Any]:
    """A report within the size limit, sent by the runtime, whose facts hold `values` empty lists: 3 bytes
    each on the wire, 64 in the grader once decoded."""
    return {"x": [[] for _ in range(values)]}
