"""Rank side of exercise 4: one process calls the student's launcher on functions of ours.

The launched functions leave evidence the launcher cannot fake, as files in a folder of the run:
their pid when they start, the time they finish or raise, and, if their process is still alive a
while after they returned, the Python stacks of that process. They return a large result (more
than a pipe holds) and finish in an order the grader chose, not in rank order: each waits for the
one before it in that order to finish and its process to exit (so its result has left it), whatever
pace the launcher started them at, so a launcher that keeps results in arrival order fails every time.

While the launcher runs, a watchdog thread looks for one deadlock: every function has returned,
its process is still alive and blocked writing its result, and the launcher has been waiting in a
join without a timeout throughout. It records what it saw and stops those processes, so that the
run reports instead of hanging. It judges nothing.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from grader.checks.ex04_launch.protocol import SLOW_RANK_SECONDS, digest, payload
from grader.engine.processes import child_state, kill_process
from grader.engine.rank_runtime import RankContext, chain_facts

FAILING_RANK_MESSAGE = "planted failure on the last rank"
STALL_S = 4.0  # how long after every function returned a launcher still joining is looked at
STACK_DUMP_FILE = "stack-{rank}.txt"
LAUNCHER_MARKER = "launcher"
# A rank waits for the one before it in the order only while that one may still start: this long
# after the first rank started (a fresh interpreter importing torch, at load), a launcher that
# starts one process after another has exited (a mistake of its own) is not deadlocked.
TURN_GRACE_S = 8.0
EXIT_WAIT_S = 2.0  # at most this long for the previous rank's process to exit, once its function returned
WATCHING = "watching"  # marker: the launcher's process tree is observed, so a started rank waits to be seen
SEEN_WAIT_S = 5.0  # at most this long a started rank waits for the observer to have seen its process
_stack_file: TextIO | None = None  # kept open in a launched process for its delayed stack dump


def _mark(marker_dir: str, name: str, text: str = "") -> None:
    staged = Path(marker_dir, f".{name}")
    staged.write_text(text)
    staged.replace(Path(marker_dir, name))


def _started(marker_dir: str, rank: int) -> None:
    """Mark this rank started, and wait (briefly) until the observer has seen this process alive, where one watches."""
    _mark(marker_dir, f"started-{rank}", str(os.getpid()))
    if Path(marker_dir, WATCHING).exists():
        until = time.monotonic() + SEEN_WAIT_S
        while not Path(marker_dir, f"seen-{rank}-{os.getpid()}").exists() and time.monotonic() < until:
            time.sleep(0.002)


def report_identity(
    rank: int, world_size: int, token: str, marker_dir: str, delays: list[float], seed: int, size: int
) -> dict[str, Any]:
    """The launched function: who it ran as, where, with what; finishes after its rank's delay."""
    global _stack_file
    _started(marker_dir, rank)
    result = {
        "rank": rank,
        "world_size": world_size,
        "token": token,
        "pid": os.getpid(),
        "payload": payload(seed, rank, size),
    }
    _wait_turn(rank, Path(marker_dir), delays)
    _mark(marker_dir, f"done-{rank}", repr(time.time()))
    # If this process is still alive well after returning, its stacks show what holds it.
    _stack_file = open(Path(marker_dir, STACK_DUMP_FILE.format(rank=rank)), "w")
    faulthandler.dump_traceback_later(STALL_S / 2, file=_stack_file)
    return result


def _exited(pid: int) -> bool:
    """A sibling process has exited (a zombie counts: its result has left it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZXx"
    except (OSError, IndexError):
        return child_state(pid) != "running"


def _wait_turn(rank: int, folder: Path, delays: list[float]) -> None:
    """Return after the rank before this one in the drawn order (ranks by delay) has finished, its
    process has exited (or EXIT_WAIT_S passed), and the difference of their delays: the ranks finish
    in that order even when the launcher started them at another pace (a loaded machine)."""
    if not 0 <= rank < len(delays):
        return
    order = sorted(range(len(delays)), key=lambda r: (delays[r], r))
    position = order.index(rank)
    launcher = _markers(folder, LAUNCHER_MARKER).get(0)
    if position == 0 or launcher == str(os.getpid()):  # fn called in the launcher: nothing to wait for
        time.sleep(delays[rank])
        return
    before = order[position - 1]
    while not Path(folder, f"done-{before}").exists():
        started = _markers(folder, "started")
        first = min((_mtime(folder, f"started-{r}") for r in started), default=time.time())
        if before not in started and time.time() - first > TURN_GRACE_S:
            break  # it never started: the launcher runs one process at a time
        time.sleep(0.01)
    else:
        pid, waited = int(_markers(folder, "started")[before]), time.monotonic()
        while pid != os.getpid() and not _exited(pid) and time.monotonic() - waited < EXIT_WAIT_S:
            time.sleep(0.01)
    time.sleep(max(0.0, delays[rank] - delays[before]))


def _mtime(folder: Path, name: str) -> float:
    try:
        return Path(folder, name).stat().st_mtime
    except OSError:
        return time.time()


def fail_on_last_rank(rank: int, world_size: int, marker_dir: str) -> None:
    _started(marker_dir, rank)
    if rank == world_size - 1:
        _mark(marker_dir, f"raised-{rank}", repr(time.time()))
        raise ValueError(FAILING_RANK_MESSAGE)
    time.sleep(SLOW_RANK_SECONDS)
    _mark(marker_dir, f"slept-{rank}", repr(time.time()))


def _markers(folder: Path, prefix: str) -> dict[int, str]:
    found = {}
    for path in folder.glob(f"{prefix}-*"):
        try:
            found[int(path.name.rsplit("-", 1)[1])] = path.read_text()
        except (ValueError, OSError):
            continue
    return found


def _left_behind(folder: Path) -> dict[str, list[int]]:
    """The launched processes still there when the launcher returned: running, or exited but
    never waited for (a zombie on POSIX). multiprocessing's own helpers are not among them."""
    states: dict[str, list[int]] = {"running": [], "unreaped": []}
    for rank, pid in sorted(_markers(folder, "started").items()):
        state = child_state(int(pid))
        if state in states:
            states[state].append(rank)
    return states


PLAIN_DEPTH = 8  # deeper than any result of ours: below it a returned value travels as its repr
PLAIN_ITEMS = 64  # items of a returned list or dict kept: the judge needs W of them


def _plain(value: Any, depth: int = 0) -> Any:
    """A returned value as plain facts, bounded in depth and size whatever the launcher returned."""
    if depth > PLAIN_DEPTH:
        return repr(value)[:300]
    if isinstance(value, dict):
        items = list(value.items())[:PLAIN_ITEMS]
        plain = {str(k): _plain(v, depth + 1) for k, v in items if k != "payload"}
        text = value.get("payload")
        if isinstance(text, str):  # a digest travels, not the megabytes
            plain.update(payload_chars=len(text), payload_digest=digest(text))
        elif "payload" in value:
            plain["payload"] = _plain(text, depth + 1)
        return plain
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value[:PLAIN_ITEMS]]
    if isinstance(value, str):
        return value[:10_000]
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return repr(value)[:300]


# Where a launcher waits for its processes to exit: Process.join and torch's ProcessContext.join.
_JOINS = {("process.py", "join"), ("spawn.py", "join")}


def _frames(thread_id: int) -> list[tuple[str, str, int]]:
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return []
    return [(summary.filename, summary.name, summary.lineno or 0) for summary in traceback.extract_stack(frame)]


class StallWatch:
    """Watches the launcher (the main thread) for the stall described in the module docstring."""

    SAMPLES = 5

    def __init__(self, folder: Path, world_size: int, student_file: str) -> None:
        self.folder, self.world_size, self.student_file = folder, world_size, student_file
        self.seen: dict[str, Any] | None = None
        self._main = threading.main_thread().ident or 0
        self._returned = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="grader-stall-watch", daemon=True)

    def __enter__(self) -> StallWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._returned.set()
        self._thread.join()

    def _joining(self) -> bool:
        """The launcher waits, with no timeout, for a process to exit."""
        frame = sys._current_frames().get(self._main)
        while frame is not None:
            code = frame.f_code
            if (Path(code.co_filename).name, code.co_name) in _JOINS and "multiprocessing" in code.co_filename:
                return frame.f_locals.get("timeout", 0) is None
            frame = frame.f_back
        return False

    def _watch(self) -> None:
        while not self._returned.wait(0.1):
            done = _markers(self.folder, "done")
            if len(done) < self.world_size:
                continue
            waited = time.time() - max(float(t) for t in done.values())
            if waited < STALL_S:
                continue
            started = _markers(self.folder, "started")
            alive = [rank for rank, pid in started.items() if child_state(int(pid)) == "running"]
            if not alive:
                continue
            samples = []
            for _ in range(self.SAMPLES):
                samples.append(self._joining())
                if self._returned.wait(0.1):
                    return
            if all(samples) and self._record(waited, alive):
                return

    def _record(self, waited: float, alive: list[int]) -> bool:
        """Record the stall and stop the processes, if some of them are blocked writing their result
        (their stacks, dumped after they returned, are in multiprocessing's queue or connection code):
        a process that is merely slow to exit (an interpreter with torch, on a loaded machine) is
        left alone."""
        stacks = {}
        for rank in alive:
            try:
                stacks[str(rank)] = Path(self.folder, STACK_DUMP_FILE.format(rank=rank)).read_text()[-6000:]
            except OSError:
                stacks[str(rank)] = ""
        writing = [
            rank
            for rank, stack in stacks.items()
            if "multiprocessing/queues.py" in stack or ("multiprocessing/connection.py" in stack and "send" in stack)
        ]
        if not writing:
            return False
        student = [
            f"{Path(file).name}:{line} in {name}()"
            for file, name, line in _frames(self._main)
            if file == self.student_file
        ]
        self.seen = {
            "seconds_after_return": round(waited, 2),
            "alive": alive,
            "writing": writing,
            "launcher_at": student[-1:],
        }
        for rank, pid in _markers(self.folder, "started").items():
            if rank in alive:
                kill_process(int(pid))
        return True


def _descends(pid: int, launcher: int) -> bool:
    """Whether the kernel shows `pid` alive (not a zombie) with a parent chain that reaches `launcher` (Linux /proc)."""
    seen: set[int] = set()
    current = pid
    while current > 1 and current not in seen:
        seen.add(current)
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return False
        if current == pid and fields[0] in "ZXx":
            return False
        current = int(fields[1])
        if current == launcher:
            return True
    return False


class ProcessWatch:
    """Sees, outside the code under test's Python, which process each `started` marker names: the launcher's own, a
    live process descended from it (its parent chain, as the kernel shows it in /proc, reaches the launcher), or
    neither: a pid a launcher wrote about a process it never started. Each pid a marker names is looked at when the
    marker appears (a rank waits for that: `_started`) and, if it changed, again when the launcher has returned.
    Linux only: elsewhere (no /proc) nothing is observed, and `facts()` is None."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.launcher = folder, os.getpid()
        self.active = Path("/proc/self/stat").exists()
        self.looked: dict[tuple[int, int], bool] = {}  # (rank, pid) -> the launcher's or its live descendant
        self._returned = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="grader-process-watch", daemon=True)

    def __enter__(self) -> ProcessWatch:
        if self.active:
            _mark(str(self.folder), WATCHING)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._returned.set()
        if self.active:
            self._thread.join()

    def _look(self) -> None:
        for rank, text in _markers(self.folder, "started").items():
            try:
                pid = int(text)
            except ValueError:
                continue
            if (rank, pid) not in self.looked:
                self.looked[(rank, pid)] = pid == self.launcher or _descends(pid, self.launcher)
                _mark(str(self.folder), f"seen-{rank}-{pid}")

    def _watch(self) -> None:
        while not self._returned.wait(0.002):
            self._look()

    def facts(self) -> dict[str, Any] | None:
        """The pid each marker names now, and the ranks whose pid is neither the launcher's nor a descendant's."""
        if not self.active:
            return None
        self._look()
        pids = {rank: int(text) for rank, text in _markers(self.folder, "started").items() if text.isdigit()}
        return {
            "pids": {str(rank): pid for rank, pid in sorted(pids.items())},
            "strangers": sorted(rank for rank, pid in pids.items() if not self.looked.get((rank, pid), False)),
        }


def _warm_forkserver() -> None:
    """A forkserver the launcher may start imports torch once, not once per rank: only faster."""
    multiprocessing.set_forkserver_preload(["torch", "torch.multiprocessing"])


def launch_identity(
    ctx: RankContext, world_size: int, start_method: str, delays: list[float], seed: int, size: int
) -> dict[str, Any]:
    launch = ctx.student("launch_distributed")
    markers = ctx.run_dir / "markers"
    markers.mkdir()
    _mark(str(markers), f"{LAUNCHER_MARKER}-0", str(os.getpid()))
    _warm_forkserver()
    ctx.facts["launcher_pid"] = os.getpid()
    started = time.perf_counter()
    with ProcessWatch(markers) as processes, StallWatch(markers, world_size, str(ctx.student_file)) as watch:
        try:
            results = launch(report_identity, world_size, ("token-42", str(markers), delays, seed, size), start_method)
        except Exception:
            if watch.seen is None:
                raise
            results = None  # the processes the watchdog stopped made the launcher raise
    ctx.facts["seconds"] = time.perf_counter() - started
    ctx.facts["observed"] = processes.facts()
    ctx.facts["stalled"] = watch.seen
    finished = _markers(markers, "done")
    ctx.facts["left_behind"] = _left_behind(markers)
    ctx.facts["finished_at_return"] = sorted(finished)
    ctx.facts["finish_order"] = sorted(finished, key=lambda rank: float(finished[rank]))
    ctx.facts["results"] = _plain(results)
    return {}


def launch_failing(ctx: RankContext, world_size: int, start_method: str) -> dict[str, Any]:
    launch = ctx.student("launch_distributed")
    markers = ctx.run_dir / "markers"
    markers.mkdir()
    _warm_forkserver()
    with ProcessWatch(markers) as processes:
        try:
            launch(fail_on_last_rank, world_size, (str(markers),), start_method)
            ctx.facts["raised"] = None
        except NotImplementedError:
            raise  # the untouched stub: "not implemented yet", not "an error without a traceback"
        except Exception as exc:
            # the whole chain: a launcher may re-raise the rank's error `from` it, as its __cause__
            ctx.facts["raised"] = {"type": type(exc).__name__, "message": str(exc)[-4000:], "chain": chain_facts(exc)}
    returned = time.time()
    ctx.facts["observed"] = processes.facts()
    raised_at = _markers(markers, "raised").get(world_size - 1)
    ctx.facts["seconds_after_raise"] = returned - float(raised_at) if raised_at else None
    ctx.facts["slept_before_return"] = sorted(
        rank for rank, at in _markers(markers, "slept").items() if float(at) <= returned
    )
    ctx.facts["left_behind"] = _left_behind(markers)
    return {}
