"""The portable launcher's connections: loopback TCP, the one kind of channel every system has and
`select` can wait on (Windows selects only sockets; it cannot pass a descriptor to another process).

Whoever needs a channel connects to the grader's listener and first sends a fixed-size hello: a
secret token (the engine's for its pool host, the run's for a rank), a role and a rank. The grader
keeps a connection only if the hello is right, so another grading on the machine, or a process of
an earlier run, cannot join or feed a run. Control messages travel as `wire` frames of at most
wire.MAX_CONTROL_BYTES.
"""

from __future__ import annotations

import secrets
import socket
import time
from typing import Any

from grader.engine import wire

TOKEN_CHARS = 32
HELLO_BYTES = TOKEN_CHARS + 1 + 6  # token, role, rank (six digits)
CONTROL, OUTPUT, REPORT, STACK = "c", "o", "r", "s"
RANK_ROLES = {OUTPUT: "output", REPORT: "report", STACK: "stack"}
HELLO_TIMEOUT_S = 2.0
BACKLOG = 256


def new_token() -> str:
    return secrets.token_hex(TOKEN_CHARS // 2)


def listen() -> socket.socket:
    """A listener on a loopback port the system picks."""
    return socket.create_server(("127.0.0.1", 0), backlog=BACKLOG)


def connect(port: int, token: str, role: str, rank: int = 0, timeout: float = 30.0) -> socket.socket:
    """A connection to the grader's listener that has said whose it is."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(f"{token}{role}{rank:06d}".encode())
    sock.settimeout(None)
    return sock


def read_hello(conn: socket.socket, timeout: float = HELLO_TIMEOUT_S) -> tuple[str, str, int] | None:
    """(token, role, rank) from a new connection, or None if it did not send a well-formed hello in
    time (it is then closed). Whoever connects sends the hello at once, before anything else."""
    conn.settimeout(timeout)
    hello = b""
    try:
        while len(hello) < HELLO_BYTES:
            chunk = conn.recv(HELLO_BYTES - len(hello))
            if not chunk:
                break
            hello += chunk
    except OSError:
        pass
    text = hello.decode("ascii", errors="replace")
    if len(hello) != HELLO_BYTES or not text[TOKEN_CHARS + 1 :].isdigit():
        conn.close()
        return None
    conn.settimeout(None)
    return text[:TOKEN_CHARS], text[TOKEN_CHARS], int(text[TOKEN_CHARS + 1 :])


def accept(listener: socket.socket, token: str, role: str, timeout: float) -> socket.socket:
    """The first connection that says hello with `token` and `role` (TimeoutError if none comes)."""
    give_up = time.monotonic() + timeout
    while True:
        listener.settimeout(max(0.01, give_up - time.monotonic()))
        conn, _ = listener.accept()
        hello = read_hello(conn)
        if hello is not None and hello[:2] == (token, role):
            return conn
        if hello is not None:
            conn.close()


class Framed:
    """Control messages (dicts) over a stream socket, as length-prefixed `wire` frames."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(wire.encode(message))

    def pending(self) -> bool:
        """Whether a whole message is already here (the socket may not be readable for it)."""
        expected = wire.frame_length(self._buffer)
        return expected is not None and len(self._buffer) >= expected

    def receive(self, timeout: float | None = None) -> Any:
        """The next message. TimeoutError, EOFError when the other side has closed, OSError when
        the connection broke, wire.WireError (a ValueError) when a frame is malformed."""
        give_up = None if timeout is None else time.monotonic() + timeout
        while not self.pending():
            expected = wire.frame_length(self._buffer)
            if expected is not None and expected > wire.MAX_CONTROL_BYTES + wire.HEADER_BYTES:
                raise wire.WireError(
                    wire.too_large("a control message", expected - wire.HEADER_BYTES, wire.MAX_CONTROL_BYTES)
                )
            self.sock.settimeout(None if give_up is None else max(0.0, give_up - time.monotonic()))
            try:
                data = self.sock.recv(1 << 16)
            finally:
                self.sock.settimeout(None)
            if not data:
                raise EOFError("the connection was closed")
            self._buffer += data
        length = wire.frame_length(self._buffer)
        assert length is not None
        frame = bytes(self._buffer[:length])
        del self._buffer[:length]
        return wire.decode(frame, "a control message", wire.MAX_CONTROL_BYTES, max_values=None)
