"""The grader's line to the process that starts its ranks: the forking zygote or the portable pool.

Both speak the protocol in zygote.py; they differ in how messages travel and how each rank's
output, report and stack streams reach the grader:
- `ZygoteLink` (fork launcher, Linux): a SOCK_SEQPACKET socket pair; the grader makes two pipes
  (output, stack) and a socket pair (report) per rank and passes their rank ends with the spawn request.
  The report travels over a socket because a pipe's write end can be opened for reading through
  /proc/self/fd: code in the rank could take back its runtime's opening (wire.sealed_encoder) before the
  grader reads it. A socket's end cannot be opened that way, and reading it gives only what the grader sends
  (nothing).
- `PoolLink` (portable launcher, every system): loopback TCP (loopback.py); each rank connects
  its three streams to the grader's listener with the run's token.
The supervisor reads the streams of a run through `RunStreams`, whichever link made them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from grader.engine import loopback, wire
from grader.engine.contract import Confinement
from grader.engine.processes import FDS_PER_RANK

ROLES = ("output", "report", "stack")


@dataclass
class RunStreams:
    """One run's rank streams: `sources` maps a pipe (fd) or socket to (role, rank). With a
    listener, streams join while the run goes on (`admit`)."""

    world_size: int
    sources: dict[Any, tuple[str, int]] = field(default_factory=dict)
    to_pass: list[int] = field(default_factory=list)  # write ends for the launcher (fork)
    spawn_fields: dict[str, Any] = field(default_factory=dict)
    listener: socket.socket | None = None
    token: str = ""

    def admit(self) -> dict[Any, tuple[str, int]]:
        """Connections made since the last call that said hello with this run's token, each once."""
        if self.listener is None:
            return {}
        joined: dict[Any, tuple[str, int]] = {}
        taken = set(self.sources.values())
        self.listener.setblocking(False)
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return joined
            hello = loopback.read_hello(conn)
            role = loopback.RANK_ROLES.get(hello[1], "") if hello else ""
            if (
                hello is None
                or hello[0] != self.token
                or not role
                or not 0 <= hello[2] < self.world_size
                or (role, hello[2]) in taken
            ):
                conn.close()
                continue
            joined[conn] = (role, hello[2])
            taken.add((role, hello[2]))
            self.sources[conn] = (role, hello[2])

    @staticmethod
    def read(source: Any) -> bytes:
        try:
            return source.recv(1 << 16) if isinstance(source, socket.socket) else os.read(source, 1 << 16)
        except OSError:
            return b""

    def close(self) -> None:
        for source in [*self.sources, *self.to_pass]:
            try:
                source.close() if isinstance(source, socket.socket) else os.close(source)
            except OSError:
                pass
        self.sources.clear()
        self.to_pass.clear()


class LauncherProcess(Protocol):
    """The launcher process as the engine uses it: a Popen, or a zygote adopted from the warm daemon."""

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class Link(Protocol):
    """What the supervisor needs of a launcher process's line (see the module docstring)."""

    name: str
    start_timeout: float  # how long a spawn may wait for its ranks (a pool may have to warm one)

    def launch(
        self, argv: list[str], env: dict[str, str], log: IO[bytes], wrap: Confinement | None
    ) -> subprocess.Popen[bytes]: ...

    def connect(self, process: LauncherProcess, timeout: float) -> None: ...

    def send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None: ...

    def receive(self, timeout: float | None) -> Any: ...

    def pending(self) -> bool: ...

    def selectable(self) -> socket.socket: ...

    def open_run(self, world_size: int) -> RunStreams: ...

    def close(self) -> None: ...

    def shutdown(self) -> None: ...


def _python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-P", "-m", module, *args]


class ZygoteLink:
    """The fork launcher's line: one packet per message, pipes passed as descriptors."""

    name = "fork"
    start_timeout = 30.0

    def __init__(self) -> None:
        self._sock: socket.socket | None = None

    def launch(
        self, argv: list[str], env: dict[str, str], log: IO[bytes], wrap: Confinement | None
    ) -> subprocess.Popen[bytes]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = _python_module("grader.engine.zygote", str(theirs.fileno()), *argv)
        if wrap is not None:
            command, env = wrap.command(command), wrap.environment(env)
        try:
            process = subprocess.Popen(
                command, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        return process

    def adopt(self, sock: socket.socket) -> None:
        """Speak over a control socket that another process's `launch` made (the warm daemon's)."""
        self._sock = sock

    def connect(self, process: LauncherProcess, timeout: float) -> None:
        """Connected from the start."""

    def send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        assert self._sock is not None
        socket.send_fds(self._sock, [json.dumps(message).encode()], list(fds))

    def receive(self, timeout: float | None) -> Any:
        assert self._sock is not None
        self._sock.settimeout(timeout)
        try:
            data = self._sock.recv(wire.MAX_CONTROL_BYTES)
        finally:
            self._sock.settimeout(None)
        if not data:
            raise EOFError
        return json.loads(data)

    def pending(self) -> bool:
        return False  # one packet, one message

    def selectable(self) -> socket.socket:
        assert self._sock is not None
        return self._sock

    def open_run(self, world_size: int) -> RunStreams:
        streams = RunStreams(world_size)
        for rank in range(world_size):
            for role in ROLES:
                if role == "report":
                    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                    streams.sources[ours] = (role, rank)
                    streams.to_pass.append(theirs.detach())
                    continue
                read_end, write_end = os.pipe()
                streams.sources[read_end] = (role, rank)
                streams.to_pass.append(write_end)
        assert len(streams.to_pass) == FDS_PER_RANK * world_size
        return streams

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def shutdown(self) -> None:
        self.close()


class PoolLink:
    """The portable launcher's line: framed messages over loopback TCP; ranks connect their streams."""

    name = "portable"
    start_timeout = 300.0  # a run may wait for interpreters to import torch (seconds each, loaded)

    def __init__(self) -> None:
        self._listener: socket.socket | None = None
        self._token = loopback.new_token()
        self._framed: loopback.Framed | None = None

    def launch(
        self, argv: list[str], env: dict[str, str], log: IO[bytes], wrap: Confinement | None
    ) -> subprocess.Popen[bytes]:
        assert wrap is None, "a sandbox confines the fork launcher only"
        self._listener = self._listener or loopback.listen()
        port = str(self._listener.getsockname()[1])
        process = subprocess.Popen(
            _python_module("grader.engine.pool", port, *argv), stdin=subprocess.PIPE, stdout=log, stderr=log, env=env
        )
        assert process.stdin is not None
        with process.stdin:
            process.stdin.write(f"{self._token}\n".encode())  # a secret: not on the command line
        return process

    def connect(self, process: LauncherProcess, timeout: float) -> None:
        """Wait for the pool host to connect back (it does at once, before importing anything)."""
        if self._framed is not None:
            return
        assert self._listener is not None
        give_up = time.monotonic() + timeout
        while True:
            try:
                self._framed = loopback.Framed(loopback.accept(self._listener, self._token, loopback.CONTROL, 1.0))
                return
            except TimeoutError:
                if process.poll() is not None:
                    raise EOFError from None
                if time.monotonic() > give_up:
                    raise

    def send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        assert self._framed is not None and not fds
        self._framed.send(message)

    def receive(self, timeout: float | None) -> Any:
        assert self._framed is not None
        return self._framed.receive(timeout)

    def pending(self) -> bool:
        return self._framed is not None and self._framed.pending()

    def selectable(self) -> socket.socket:
        assert self._framed is not None
        return self._framed.sock

    def open_run(self, world_size: int) -> RunStreams:
        assert self._listener is not None
        token = loopback.new_token()
        port = self._listener.getsockname()[1]
        return RunStreams(
            world_size, spawn_fields={"streams": {"port": port, "token": token}}, listener=self._listener, token=token
        )

    def close(self) -> None:
        """Drop the line to the pool host (which then ends)."""
        if self._framed is not None:
            self._framed.sock.close()
            self._framed = None

    def shutdown(self) -> None:
        """Stop listening too (a later launch listens again)."""
        self.close()
        if self._listener is not None:
            self._listener.close()
            self._listener = None


def new_link(launcher: str) -> Link:
    return PoolLink() if launcher == "portable" else ZygoteLink()
