"""A warm `grader check`: a per-user background process keeps one zygote warm for the next check.

The first check in a shell pays seconds for the zygote's import of torch; a student runs `grader check`
dozens of times an hour. So the first check leaves behind a small daemon (`python -m grader.warm`)
that starts a zygote and lets it import torch. The next check connects to the daemon's Unix socket
and receives that zygote's control socket and log as descriptors (SCM_RIGHTS): from then on the check
speaks to the zygote exactly as if it had launched it (`Engine.adopt`), and the daemon warms the next
zygote. A zygote serves one check and exits when the check closes its line, as it always did, so every
check still forks fresh ranks from a zygote no other check has used, and the judge stays in the
check's own process. The daemon never runs a rank, a check or student code.

Only its user reaches it: the socket lives in a directory of mode 0700 owned by the user (checked,
and not a symlink), under $XDG_RUNTIME_DIR or the temp dir, and the daemon checks the peer's uid
(SO_PEERCRED). It exits after GRADER_WARM_IDLE seconds (default 600) with no check, and when a check
brings a different fingerprint (the grader's files, torch's version, the interpreter, the folder,
the environment the ranks inherit): that check starts a fresh daemon and takes its first zygote.
An exiting daemon never cuts short a check running on a zygote it handed out: a handed zygote has no
parent-death signal (it ends when its check closes its line, or when the check dies), and the daemon
removes its socket at once, kills only the zygote it has not handed out, and lingers, however long,
until each handed zygote has ended, to remove its scratch folder.
The daemon imports the next zygote's torch only once no check of its own is running, so a warm
zygote never competes with a check's ranks for the CPUs.
GRADER_WARM=0 or `grader check --no-warm` turn it off; `grader grade` and `grader watch` never use it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from grader import private_network
from grader.engine.contract import EngineError
from grader.engine.launchers import ZygoteLink
from grader.engine.platforms import UNTIED, LauncherError, chosen_launcher
from grader.engine.preload import BASE_PRELOAD
from grader.engine.supervisor import Engine, launcher_env

DEFAULT_IDLE_S = 600.0
CONNECT_TIMEOUT_S = 5.0
DAEMON_START_S = 10.0  # a new daemon's Python start, on a loaded machine
SOCKET_NAME = "engine.sock"
_ENV_PREFIXES = ("GRADER_", "TORCH", "CUDA", "NCCL", "GLOO", "OMP_", "MKL_", "PYTHON", "LD_", "PATH", "HOME")


class WarmError(RuntimeError):
    """The warm daemon's folder or socket cannot be trusted or reached."""


def enabled(no_warm: bool = False) -> bool:
    """Warm checks are on unless turned off; only the fork launcher (Linux) has a zygote to keep."""
    if no_warm or os.environ.get("GRADER_WARM", "1").strip() in ("0", "no", "off", "false"):
        return False
    return hasattr(socket, "send_fds") and sys.platform.startswith("linux")


def runtime_dir() -> Path:
    """GRADER_WARM_DIR, else $XDG_RUNTIME_DIR/grader-warm, else grader-warm-UID in the temp dir."""
    if os.environ.get("GRADER_WARM_DIR"):
        return Path(os.environ["GRADER_WARM_DIR"])
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "grader-warm"
    return Path(tempfile.gettempdir()) / f"grader-warm-{os.getuid()}"


def private_dir(path: Path, create: bool = True) -> Path:
    """`path`, made if missing, or WarmError: it must be a real directory (no symlink), ours, mode 0700."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    try:
        info = os.lstat(path)
    except FileNotFoundError as exc:
        raise WarmError(f"{path} does not exist") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise WarmError(f"{path} is not a directory (a symlink?)")
    if info.st_uid != os.getuid():
        raise WarmError(f"{path} is owned by uid {info.st_uid}, not by you")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise WarmError(f"{path} is open to other users (mode {stat.S_IMODE(info.st_mode):o})")
    return path


def preload_for(workers_modules: list[str]) -> list[str]:
    return list(dict.fromkeys([*BASE_PRELOAD, *workers_modules]))


def fingerprint(preload: list[str]) -> str:
    """What a warm zygote depends on: when any of it changes, the daemon is replaced."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path}:{info.st_mtime_ns}:{info.st_size}\n".encode())
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "none"
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES) and k != "GRADER_WARM_IDLE")
    digest.update(json.dumps([torch_version, sys.executable, os.getcwd(), env, preload]).encode())
    return digest.hexdigest()


# --- the check's side ---------------------------------------------------------------------------


class AdoptedZygote:
    """A zygote the daemon launched (its child, not ours): watched through a pidfd, killed by signal."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = 1  # its exit status is the daemon's to read; it is gone
            os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"zygote {self.pid}", timeout or 0.0)
            self.poll()
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


def warm_engine(workers_modules: list[str], launcher: str | None = None) -> tuple[Engine | None, str]:
    """A started engine on the daemon's warm zygote, and a note for -v; (None, why) to run cold.

    Never raises: a warm engine is an optimisation, and a check without one is a normal check.
    """
    try:
        if chosen_launcher(launcher if launcher in ("fork", "portable") else None)[0] != "fork":
            return None, "warm engine: not with the portable launcher"
        preload = preload_for(workers_modules)
        folder = private_dir(runtime_dir())
        print_ = fingerprint(preload)
        answer, fds = _ask(folder, print_, preload)
        if answer.get("handed") and len(fds) == 2:
            try:
                zygote = AdoptedZygote(int(answer["pid"]))
            except (OSError, ValueError):
                for fd in fds:
                    os.close(fd)  # the zygote sees its line close and ends
                raise
            engine = Engine(preload=workers_modules, launcher="fork")
            log = os.fdopen(fds[1], "w+b")
            engine.adopt(socket.socket(fileno=fds[0]), zygote, log, answer["scratch"])
            started = f", a new daemon ({answer['started']})" if answer.get("started") else ""
            return engine, f"warm engine: zygote {answer['pid']} from daemon {answer['daemon']}{started}"
        for fd in fds:
            os.close(fd)
        return None, f"warm engine: not used ({answer.get('why', 'no answer')})"
    except (OSError, WarmError, EngineError, LauncherError, ValueError, KeyError, TypeError) as exc:
        return None, f"warm engine: not used ({exc})"


def _ask(folder: Path, print_: str, preload: list[str]) -> tuple[dict[str, Any], list[int]]:
    """Ask the daemon for a zygote. Where none answers (or it was stale), start one and take its first
    zygote: it imports torch for this check, instead of a second zygote importing beside it."""
    path = folder / SOCKET_NAME
    request = {"fingerprint": print_, "preload": preload}
    try:
        answer, fds = _request(path, request)
        if not answer.get("stale"):
            return answer, fds
        _wait_gone(path)
        why = "the grader, torch or the environment changed"
    except (FileNotFoundError, ConnectionRefusedError):
        why = "no daemon was running"
    daemon = _start_daemon(folder, preload, print_)
    give_up = time.monotonic() + DAEMON_START_S
    while True:
        try:
            answer, fds = _request(path, request)
            return {**answer, "started": why}, fds
        except (FileNotFoundError, ConnectionRefusedError):
            if daemon.poll() not in (None, 0) or time.monotonic() > give_up:  # 0: another check's won
                return {"why": f"{why}; the new daemon did not answer in time"}, []
            time.sleep(0.02)


def _request(path: Path, message: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(CONNECT_TIMEOUT_S)
        sock.connect(str(path))
        sock.sendall(json.dumps(message).encode() + b"\n")
        data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 4)
    answer = json.loads(data or b"{}")
    if not isinstance(answer, dict):
        raise ValueError("the warm daemon sent a malformed answer")
    return answer, list(fds)


def _wait_gone(path: Path, timeout: float = 2.0) -> None:
    give_up = time.monotonic() + timeout
    while path.exists() and time.monotonic() < give_up:
        time.sleep(0.02)


def _start_daemon(folder: Path, preload: list[str], print_: str) -> subprocess.Popen[bytes]:
    """Detached (its own session, no terminal), so it outlives this check and the shell's Ctrl-C."""
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "grader.warm", str(folder), json.dumps(preload), print_],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=launcher_env(),
        start_new_session=True,
    )


# --- the daemon ---------------------------------------------------------------------------------


class _Warm:
    """One zygote launched and warming, not yet handed to a check."""

    def __init__(self, preload: list[str]) -> None:
        self.preload = preload
        self.link = ZygoteLink()
        self.scratch = tempfile.mkdtemp(prefix="grader-scratch-")
        self.log: IO[bytes] = tempfile.TemporaryFile()
        env = dict(os.environ)  # the daemon's, which is the launcher's (`_start_daemon`)
        wrap = private_network.PrivateNetwork(self.scratch) if private_network.unavailable() is None else None
        self.process = self.link.launch([json.dumps(preload), self.scratch, UNTIED], env, self.log, wrap)


class Daemon:
    def __init__(self, folder: Path, preload: list[str], print_: str, idle: float) -> None:
        self.folder = folder
        self.print_ = print_  # the starting check's: this process's environment is the launcher's
        self.idle = idle
        self.warm: _Warm | None = _Warm(preload)
        self.handed: list[tuple[subprocess.Popen[bytes], str]] = []  # zygotes serving a check, and scratch
        self.refill: list[str] | None = None  # the preload of the next zygote, once no check is running
        self.last_used = time.monotonic()

    def serve(self, listener: socket.socket) -> None:
        listener.settimeout(0.5)
        while True:
            self._reap()
            if self.handed:  # a check is still running on one of ours: idle counts from its end
                self.last_used = time.monotonic()
            elif self.warm is None and self.refill is not None:
                self.warm = _Warm(self.refill)  # not during the check: its ranks need the CPUs
            elif time.monotonic() - self.last_used > self.idle:
                return
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                self.last_used = time.monotonic()
                if self._answer(conn) == "stale":
                    return

    def _answer(self, conn: socket.socket) -> str:
        conn.settimeout(CONNECT_TIMEOUT_S)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        if int.from_bytes(creds[4:8], sys.byteorder) != os.getuid():
            return "refused"  # not our user (the folder's mode should have stopped them already)
        try:
            request = json.loads(conn.makefile("rb").readline())
        except (OSError, ValueError):
            return "refused"
        if request.get("fingerprint") != self.print_:
            (self.folder / SOCKET_NAME).unlink(missing_ok=True)  # the next check starts a new daemon; we hold the lock
            conn.sendall(json.dumps({"stale": True, "why": "the grader, torch or the environment changed"}).encode())
            return "stale"
        preload = request.get("preload")
        if not isinstance(preload, list) or not all(isinstance(m, str) for m in preload):
            return "refused"
        if self.warm is None or self.warm.preload != preload or self.warm.process.poll() is not None:
            self._replace(preload)  # still importing: the check waits for it to be ready, as a cold one would
        warm = self.warm
        assert warm is not None
        sock = warm.link.selectable()
        answer = {"handed": True, "pid": warm.process.pid, "daemon": os.getpid(), "scratch": warm.scratch}
        socket.send_fds(conn, [json.dumps(answer).encode()], [sock.fileno(), warm.log.fileno()])
        warm.link.close()
        warm.log.close()
        self.handed.append((warm.process, warm.scratch))
        self.warm, self.refill = None, warm.preload  # the next import waits for this check to end
        return "handed"

    def _replace(self, preload: list[str]) -> None:
        self._drop()
        self.warm = _Warm(preload)

    def _drop(self) -> None:
        """The zygote not handed out ran nothing: kill it rather than wait for its imports."""
        if self.warm is not None:
            self.warm.process.kill()
            self.warm.link.close()
            self.warm.log.close()
            self.handed.append((self.warm.process, self.warm.scratch))
            self.warm = None

    def _reap(self) -> None:
        for process, scratch in list(self.handed):
            if process.poll() is not None:
                shutil.rmtree(scratch, ignore_errors=True)
                self.handed.remove((process, scratch))

    def close(self) -> None:
        """Kill the zygote not handed out; wait, without a time limit, for each handed one to end with
        its check (killing it would fail the check), and remove its scratch folder."""
        self._drop()
        for process, scratch in self.handed:
            process.wait()
            shutil.rmtree(scratch, ignore_errors=True)
        self.handed.clear()


def main() -> None:
    folder = private_dir(Path(sys.argv[1]))
    preload, print_ = json.loads(sys.argv[2]), sys.argv[3]
    idle = float(os.environ.get("GRADER_WARM_IDLE", DEFAULT_IDLE_S))
    with open(folder / "lock", "w") as lock:
        if not _lock(lock):
            return  # another check started a daemon first
        path = folder / SOCKET_NAME
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a daemon that died without cleaning up (we hold the lock)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        daemon = Daemon(folder, preload, print_, idle)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o077)
            try:
                listener.bind(str(path))
            finally:
                os.umask(old)
            listener.listen(8)
            daemon.serve(listener)
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            listener.close()
            fcntl.flock(lock, fcntl.LOCK_UN)  # a fresh daemon may start while this one ends its zygotes
            daemon.close()


def _lock(lock: IO[str], wait: float = 3.0) -> bool:
    """The folder's one daemon: wait a little for one being replaced to let go."""
    give_up = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > give_up:
                return False
            time.sleep(0.05)


if __name__ == "__main__":
    main()
