"""Code under test that goes after the report channel (tests/engine/test_report_channel.py), as a student who read
the rank runtime would write it: it rebinds what the report path could read, writes forged reports into the channel
itself, tries to read the channel back, and replaces what the grader installed."""

from __future__ import annotations

import importlib
import json
import os
import socket
import stat
import struct
import sys
import time
from collections import OrderedDict
from typing import Any

FORGED = {"facts": {"value": 999.0, "text": "forged"}, "error": None, "seconds": 0.0}


class Trap:
    """Stands in for whatever it replaces: any use of it raises, so a report path that read it would send nothing."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the report path read a rebound name (.{name})")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the report path called a rebound name")


def _owner(dotted: str) -> tuple[Any, str]:
    """The object that holds a dotted name's last part: a module, or a class inside one."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1]
    raise LookupError(dotted)


def rebind(names: list[str]) -> None:
    """Replace every one of `names` with a Trap: all owners are found first, since a builtin may be among them."""
    targets = [_owner(name) for name in names]
    put, trap = setattr, Trap()
    for owner, attribute in targets:
        put(owner, attribute, trap)


def _forged_frame() -> bytes:
    body = json.dumps(FORGED).encode()
    return struct.pack("!Q", len(body)) + body


def _sockets() -> list[int]:
    """Every socket this process holds, found as code under test can: in /proc/self/fd."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                found.append(int(name))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return found


def forge(how: str) -> None:
    """Write a well-formed report of forged facts into every socket this rank holds (its report channel among them),
    then: exit at once ("exit"), return ("return": the runtime reports after it), or have a child write it once this
    rank has exited ("child")."""
    if how == "child":
        parent = os.getpid()
        if os.fork() == 0:
            while os.getppid() == parent:  # the rank reports, then exits
                time.sleep(0.001)
            for fd in _sockets():
                os.write(fd, _forged_frame())
            os._exit(0)
        return
    for fd in _sockets():
        os.write(fd, _forged_frame())
    if how == "exit":
        os._exit(0)


def read_back() -> dict[str, Any]:
    """Try to read the report channel back: open it again for reading through /proc (what works on a pipe's write
    end), and read from the descriptor itself."""
    frame = sys._getframe()
    while "report_fd" not in frame.f_locals:
        assert frame.f_back is not None
        frame = frame.f_back
    fd = frame.f_locals["report_fd"]
    try:
        os.close(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK))
        reopened = True
    except OSError:
        reopened = False
    try:
        read = len(socket.socket(fileno=os.dup(fd)).recv(64, socket.MSG_DONTWAIT))
    except OSError:  # nothing to read (BlockingIOError), or not a socket
        read = 0
    return {"reopened": reopened, "read": read}


def edit_facts() -> None:
    """Reach into the runtime's own objects: the facts the worker records, found up the stack, edited in place."""
    frame = sys._getframe()
    while "ctx" not in frame.f_locals:
        assert frame.f_back is not None
        frame = frame.f_back
    frame.f_locals["ctx"].facts["value"] = 999.0


def tamper(what: str) -> None:
    """Replace one thing of the grader's (channel_workers.tampers installed them)."""
    import torch
    import torch.distributed as dist
    import torch.optim.optimizer as optimizer

    import grader.engine.rank_runtime as runtime

    if what == "a method of the grader":
        runtime.RankContext.spy = lambda *args, **kwargs: []  # type: ignore[method-assign]
    elif what == "a spy":
        dist.all_reduce = dist.distributed_c10d.all_reduce
    elif what == "a patch":
        torch.nn.Module.train = lambda self, mode=True: self  # type: ignore[method-assign]
    elif what == "a step hook":
        hooks = optimizer._global_optimizer_pre_hooks
        for key in list(hooks):
            hooks[key] = lambda *args: None
    elif what == "the step hooks' table":
        optimizer._global_optimizer_pre_hooks = OrderedDict()
