"""A network of its own for a student's `grader check`: the ranks' loopback, where nobody else can join.

`grader check` runs without a sandbox, but its ranks meet at a TCPStore that rank 0 hosts on the
loopback (MASTER_ADDR:MASTER_PORT, grader/engine/rank_runtime.py), and the gloo connections after it
run there too. On a shared login node every local user can reach the loopback: one could join the
store, delete or rewrite keys and make a correct solution fail. A TCPStore checks no credential, and
any client may list its keys, so a secret prefix would not hide them.

So where Linux lets an unprivileged user make a user and a network namespace, the zygote (and every
rank it forks) starts in a network namespace of its own whose loopback only it has: `wrap` runs it
through this module, which unshares, brings `lo` up and executes the zygote, under the same user id.
Nothing else changes: the grader talks to the zygote over inherited descriptors, not the network.
Where namespaces are not allowed, or GRADER_PRIVATE_NETWORK=0, checks run as before and
`grader doctor` warns.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import shutil
import socket
import struct
import sys
import tempfile

VARIABLE = "GRADER_PRIVATE_NETWORK"  # "0": checks share the machine's loopback
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def enter() -> None:
    """Move this (single-threaded) process into a new user and network namespace, as the same user, and
    bring up its loopback. OSError where the system refuses."""
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare: {os.strerror(errno)}")
    for name, text in (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


@functools.cache
def unavailable() -> str | None:
    """Why the checks' ranks cannot get a network of their own here (None: they can). Tried once, in a
    child process that binds the new loopback."""
    if sys.platform != "linux":
        return "private network namespaces are Linux's"
    if os.environ.get(VARIABLE) == "0":
        return f"{VARIABLE}=0"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read)
        try:
            enter()
            socket.create_server(("127.0.0.1", 0)).close()
            os.write(write, b"ok")
        except OSError as exc:
            os.write(write, str(exc).encode(errors="replace")[:300])
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        said = answer.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return None if said == "ok" else f"this system refuses an unprivileged network namespace ({said or 'no answer'})"


class PrivateNetwork:
    """The zygote of one `grader check`, in a network namespace of its own. Implements the engine's
    `Confinement`: the environment is the grader's, the scratch folder its own as without it."""

    def __init__(self, scratch_root: str | None = None) -> None:
        self._owns_scratch = scratch_root is None  # the warm daemon's zygotes keep the daemon's
        self.scratch_root = scratch_root or tempfile.mkdtemp(prefix="grader-scratch-")

    def command(self, argv: list[str]) -> list[str]:
        return wrap(argv)

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        return dict(base)

    def oom_kills(self) -> int:
        return 0

    def close(self) -> None:
        if self._owns_scratch:
            shutil.rmtree(self.scratch_root, ignore_errors=True)


def wrap(argv: list[str]) -> list[str]:
    """`argv` (a Python command line) run in a network namespace of its own."""
    return [argv[0], "-m", __name__, *argv]


def for_check(launcher: str | None) -> PrivateNetwork | None:
    """The confinement of a check's engine: a private network where one can be made and the ranks are
    forked (the portable launcher's ranks reach the grader over the loopback), else None."""
    if launcher == "portable" or unavailable() is not None:
        return None
    from grader.engine.platforms import chosen_launcher

    return PrivateNetwork() if chosen_launcher(launcher)[0] == "fork" else None


if __name__ == "__main__":
    enter()
    os.execv(sys.argv[1], sys.argv[1:])
