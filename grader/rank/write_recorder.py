"""Rank side: what a rank writes to disk and reads back, however the code spells it.

A checkpoint can land at its path through `torch.save(obj, path)`, through an open handle, with
keyword arguments, through a temporary file renamed onto the path, or through bytes serialized in
memory and written by hand. Only the effects are recorded, each with the time it happened:

- every serialization (`torch.save` under any name it was imported as) and every `torch.load`;
- every file opened for writing, renamed, moved or linked (Python's audit events), which also sees
  what `torch.save` to a handle, `tempfile`, `os.replace` and `shutil.move` do. `torch.save` to a
  path opens the file in C++, so that write is taken from the serialization itself.

The grader's process later decides from these events which rank put the file that ended up at a
path, and when it landed (grader.judge.writes). Nothing here judges.

`hold_saves` makes rank 0's serializations wait (at most HOLD_LIMIT) until every other rank either
waits for rank 0 (it entered a barrier that rank 0 has not entered yet) or has moved on without
waiting (called `torch.load`, or returned from the function under test). A rank that does not wait
for the checkpoint then reaches it before the file lands, every time, while code that waits costs
nothing. The held save records which ranks had moved on before it began: proof by causality that
they did not wait, whatever the clocks say. Times of loads and returns are also taken before their
waypoint is marked, for comparisons on one host.
"""

from __future__ import annotations

import functools
import inspect
import io
import os
import secrets
import sys
import time
from typing import Any

from grader.engine import tamper

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_AUDITED = frozenset({"open", "os.rename", "os.link", "os.symlink"})
HOLD_LIMIT = 1.0  # seconds a held save waits for the other ranks at most (code that syncs another way)


def _path(value: Any) -> str | None:
    """An absolute path for a str/bytes/PathLike, else None (a file descriptor, a buffer)."""
    if isinstance(value, (str, bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(value))
        return os.path.abspath(path)
    return None


class Waypoints:
    """Marker files saying where each rank of a run has got to, in a folder every rank sees (the
    grading's scratch folder, on every node): the n-th barrier it entered, or that it moved on
    (called torch.load or returned). Rank 0 holds a save until every other rank either waits for
    it (in a barrier rank 0 has not entered yet) or has moved on without waiting."""

    def __init__(self, folder: str, tag: str, rank: int, world_size: int) -> None:
        self._stem = os.path.join(folder, f".grader-waypoint-{tag}")
        self._rank, self._world_size = rank, world_size
        self._barriers = 0
        self._moved_on = False

    @classmethod
    def for_this_run(cls, folder: str) -> Waypoints:
        """Waypoints under a tag rank 0 draws and broadcasts (a collective: every rank calls it), so
        that markers of another run in the same folder, a retried one say, are never read."""
        import torch.distributed as dist

        tag = [secrets.token_hex(8)]
        dist.broadcast_object_list(tag, src=0)
        return cls(folder, tag[0], dist.get_rank(), dist.get_world_size())

    def _touch(self, marker: str) -> None:
        os.close(os.open(marker, os.O_CREAT | os.O_WRONLY, 0o600))

    def _barrier_marker(self, number: int, rank: int) -> str:
        return f"{self._stem}-barrier{number}-rank{rank}"

    def _moved_marker(self, rank: int) -> str:
        return f"{self._stem}-moved-rank{rank}"

    def enter_barrier(self) -> None:
        self._barriers += 1
        self._touch(self._barrier_marker(self._barriers, self._rank))

    def move_on(self) -> None:
        if not self._moved_on:
            self._moved_on = True
            self._touch(self._moved_marker(self._rank))

    def wait_for_others(self, limit: float = HOLD_LIMIT) -> list[int]:
        """Wait until every other rank waits for this one or has moved on; the ranks that had moved on."""
        give_up = time.monotonic() + limit
        pending = [r for r in range(self._world_size) if r != self._rank]
        while pending and time.monotonic() < give_up:
            pending = [
                r
                for r in pending
                if not (
                    os.path.exists(self._moved_marker(r)) or os.path.exists(self._barrier_marker(self._barriers + 1, r))
                )
            ]
            if pending:
                time.sleep(0.002)
        return [r for r in range(self._world_size) if r != self._rank and os.path.exists(self._moved_marker(r))]


class WriteRecorder:
    """Records this rank's serializations, loads and file writes as a list of events (see the
    module docstring). Install before the student's module is imported: `from torch import save`
    binds whatever torch.save is at that moment."""

    def __init__(self, waypoints: Waypoints | None = None, hold_saves: bool = False) -> None:
        self.events: list[dict[str, Any]] = []
        self._waypoints = waypoints
        self._hold = hold_saves
        self._quiet = 0  # > 0 while the grader itself writes (waypoints), or while torch.save writes its own target
        self._active = True

    def install(self) -> WriteRecorder:
        import torch
        import torch.distributed as dist
        import torch.serialization

        save = self._wrap_save(torch.save)
        load = self._wrap_load(torch.load)
        for owner in (torch, torch.serialization):
            tamper.install(owner, "save", save)
            tamper.install(owner, "load", load)
        if self._waypoints is not None:
            for name in ("barrier", "monitored_barrier"):
                tamper.install(dist, name, self._wrap_barrier(getattr(dist, name)))
        sys.addaudithook(self._audit)
        return self

    def stop(self) -> None:
        """Record nothing more (what the grader's own code does afterwards is not the student's)."""
        self._active = False

    def move_on(self) -> None:
        """This rank goes on without waiting for more (a load, or the function under test returned)."""
        if self._waypoints is not None:
            self._quiet += 1
            try:
                self._waypoints.move_on()
            finally:
                self._quiet -= 1

    def _wrap_barrier(self, original: Any) -> Any:
        @functools.wraps(original)
        def barrier(*args: Any, **kwargs: Any) -> Any:
            if self._active:  # which ranks called a barrier: the judge words a rank that did not wait with it
                self.events.append({"op": "barrier", "name": original.__name__, "time": time.time()})
            if self._waypoints is not None and self._active:
                self._quiet += 1
                try:
                    self._waypoints.enter_barrier()
                finally:
                    self._quiet -= 1
            return original(*args, **kwargs)

        return barrier

    def _wrap_save(self, original: Any) -> Any:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def save(*args: Any, **kwargs: Any) -> Any:
            if not self._active:
                return original(*args, **kwargs)
            try:
                target = signature.bind(*args, **kwargs).arguments.get("f")
            except TypeError:
                return original(*args, **kwargs)  # let torch raise its own error
            path = _path(target)
            event: dict[str, Any] = {
                "op": "save",
                "path": path or _path(getattr(target, "name", None)),
                "into": "path" if path else "memory" if isinstance(target, io.BytesIO) else "file",
            }
            if self._hold and self._waypoints is not None:
                self._quiet += 1
                try:
                    event["moved_on_before"] = self._waypoints.wait_for_others()
                finally:
                    self._quiet -= 1
            event["start"] = time.time()
            self.events.append(event)
            self._quiet += path is not None  # torch may open a path itself: that open is this save
            try:
                return original(*args, **kwargs)
            finally:
                self._quiet -= path is not None
                event["end"] = time.time()

        return save

    def _wrap_load(self, original: Any) -> Any:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def load(*args: Any, **kwargs: Any) -> Any:
            if not self._active:
                return original(*args, **kwargs)
            event: dict[str, Any] = {"op": "load", "start": time.time()}  # before the waypoint: see module doc
            self.move_on()
            try:
                source = signature.bind(*args, **kwargs).arguments.get("f")
            except TypeError:
                source = None
            event["path"] = _path(source) or _path(getattr(source, "name", None))
            self.events.append(event)
            try:
                return original(*args, **kwargs)
            finally:
                event["end"] = time.time()

        return load

    def _audit(self, name: str, args: tuple[Any, ...]) -> None:
        if name not in _AUDITED or self._quiet or not self._active:
            return
        if name == "open":
            path, _mode, flags = args
            if isinstance(flags, int) and flags & _WRITE_FLAGS and (target := _path(path)) is not None:
                if not os.path.isdir(target):
                    self.events.append({"op": "write", "path": target, "time": time.time()})
            return
        source, destination = _path(args[0]), _path(args[1])
        if source is not None and destination is not None:
            self.events.append(
                {
                    "op": "rename" if name == "os.rename" else "link",
                    "path": source,
                    "to": destination,
                    "time": time.time(),
                }
            )
