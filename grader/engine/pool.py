"""The portable launcher: a warm pool of interpreters, each of which becomes one rank and exits.

Where forking a process that has imported torch is unsafe or impossible (macOS, Windows), ranks
cannot be forked from a zygote. This pool host keeps interpreters that have already imported
everything a rank needs (pool_member.py), hands one to each rank of a run, and starts new ones in
the background, so that a check does not wait for torch to import. It imports nothing heavy
itself and never runs student code. Every call that differs by system is in platforms.py.

It speaks the zygote's protocol (zygote.py) over a loopback connection to the grader (loopback.py)
instead of a socket pair with descriptors: a `spawn` carries {"port", "token"} in place of pipes,
and each rank connects its output, report and stack streams to the grader itself. One more pair:
  -> {"op": "warm"}   <- {"event": "warm"} as soon as the pool is full (benchmarks, tests)

    python -P -m grader.engine.pool PORT PRELOAD_JSON SCRATCH_ROOT    (the engine's token on stdin)
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from grader.engine import loopback, platforms, run_folders
from grader.engine.contract import RankSpec

# Warm members kept: at least a 4-rank run, or two 2-rank runs, start without waiting; more where
# there are cores to warm them. The pool grows to the largest run asked for.
POOL_SIZE = min(8, max(4, os.cpu_count() or 1))
STRAY_GRACE_S = 0.3  # as the zygote's
MAX_FAILED_STARTS = 3  # members in a row that die before they are ready: the pool gives up


@dataclass
class _Slot:
    member: platforms.Member
    state: str = "warming"  # then "idle", then "rank" (of the current run)
    rank: int = -1


@dataclass
class _Run:
    run_id: str
    run_dir: Path
    slots: list[_Slot] = field(default_factory=list)
    running: set[int] = field(default_factory=set)  # pids not yet exited


class Pool:
    """The members, the run they serve (at most one at a time) and the requests waiting."""

    def __init__(self, link: loopback.Framed, modules: list[str], scratch_root: Path) -> None:
        self.link = link
        self.modules = modules
        self.scratch_root = scratch_root
        self.events: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self.slots: dict[int, _Slot] = {}
        self.run: _Run | None = None
        self.waiting: dict[str, Any] | None = None  # a spawn request until enough members are ready
        self.size = POOL_SIZE
        self.announced = False
        self.warm_wanted = False
        self.failed_starts = 0
        self.concurrency = max(1, os.cpu_count() or 1)  # members importing at once

    # --- threads that turn what happens into events -------------------------------------------
    def _read_control(self) -> None:
        while True:
            try:
                self.events.put(("control", self.link.receive(), None))
            except (EOFError, OSError, ValueError):
                self.events.put(("closed", None, None))
                return

    def _read_ready(self, slot: _Slot) -> None:
        stdout = slot.member.popen.stdout
        assert stdout is not None
        with stdout:
            for line in stdout:  # a preloaded module may print before the member's own line
                try:
                    said = json.loads(line)
                except ValueError:
                    continue
                if isinstance(said, dict) and said.get("ready"):
                    self.events.put(("ready", slot.member.pid, said.get("preload_errors", {})))
                    return

    def _wait_exit(self, slot: _Slot) -> None:
        self.events.put(("exit", slot.member.pid, slot.member.popen.wait()))

    # --- members --------------------------------------------------------------------------------
    def _refill(self) -> None:
        """Start members (from this thread: on Linux a member dies with the thread that started it)
        until the pool, and the run waiting, have what they need."""
        wanted = max(self.size, len(self.waiting["ranks"]) if self.waiting else 0)
        while True:
            warming = sum(s.state == "warming" for s in self.slots.values())
            spare = warming + sum(s.state == "idle" for s in self.slots.values())
            if spare >= wanted or warming >= self.concurrency:
                return
            argv = [sys.executable, "-P", "-m", "grader.engine.pool_member", json.dumps(self.modules), str(os.getpid())]
            slot = _Slot(platforms.start_member(argv, dict(os.environ)))
            self.slots[slot.member.pid] = slot
            threading.Thread(target=self._read_ready, args=(slot,), daemon=True).start()
            threading.Thread(target=self._wait_exit, args=(slot,), daemon=True).start()

    def _on_ready(self, pid: int, preload_errors: dict[str, str]) -> None:
        slot = self.slots.get(pid)
        if slot is None or slot.state != "warming":
            return
        slot.state = "idle"
        self.failed_starts = 0
        if not self.announced:
            self.announced = True
            self.link.send({"event": "ready", "preload_errors": preload_errors})

    def _on_exit(self, pid: int, status: int) -> None:
        slot = self.slots.pop(pid, None)
        if slot is None:
            return
        run = self.run
        if slot.state != "rank" or run is None or pid not in run.running:
            if slot.state == "warming":
                self.failed_starts += 1
                if self.failed_starts >= MAX_FAILED_STARTS:
                    self._give_up(
                        f"{MAX_FAILED_STARTS} interpreters in a row exited before they were ready "
                        f"(the last with status {status}); their errors are above"
                    )
            platforms.release_member(slot.member)
            return
        run.running.discard(pid)
        self.link.send({"event": "exited", "run": run.run_id, "rank": slot.rank, "status": status})
        if not run.running:
            self._end(run)

    # --- runs -----------------------------------------------------------------------------------
    def _start_waiting_run(self) -> None:
        request = self.waiting
        idle = [s for s in self.slots.values() if s.state == "idle"]
        if request is None or self.run is not None or len(idle) < len(request["ranks"]):
            return
        self.waiting = None
        run = _Run(request["run"], run_folders.new_run(self.scratch_root, request.get("scratch", "")))
        streams = request.get("streams", {})
        specs: list[RankSpec] = request["ranks"]
        for rank, (spec, slot) in enumerate(zip(specs, idle)):
            slot.state, slot.rank = "rank", rank
            run.slots.append(slot)
            run.running.add(slot.member.pid)
            assignment = {"spec": {**spec, "run_dir": str(run.run_dir)}, **streams}
            try:
                stdin = slot.member.popen.stdin
                assert stdin is not None
                stdin.write((json.dumps(assignment) + "\n").encode())
                stdin.flush()
            except OSError:
                pass  # it has just died: its exit is on its way and fails this rank
        self.run = run
        self.link.send({"event": "started", "run": run.run_id, "pids": [s.member.pid for s in run.slots]})

    def _signal(self, request: dict[str, Any]) -> None:
        run = self.run
        if run is None or run.run_id != request.get("run"):
            return  # a late request for a run that has already ended
        for slot in run.slots:
            if slot.member.pid in run.running:
                if request.get("action") == "stack":
                    platforms.request_stacks(slot.member)
                elif request.get("action") == "kill":
                    platforms.kill_member(slot.member)

    def _end(self, run: _Run) -> None:
        """Every rank has exited: stop what they left behind, say what it was, clean up."""
        self.run = None
        spare = [pid for pid, slot in self.slots.items() if slot.state != "rank"]
        strays = platforms.end_strays([s.member for s in run.slots], spare, run.run_dir, STRAY_GRACE_S)
        for slot in run.slots:
            platforms.release_member(slot.member)
        self.link.send(run_folders.ended(run.run_id, run.run_dir, strays))

    def _give_up(self, why: str) -> NoReturn:
        print(f"grader pool: {why}", file=sys.stderr, flush=True)
        self._kill_everything()
        os._exit(1)

    def _kill_everything(self) -> None:
        """The grader is gone or gave up: every member, and whatever any of them started."""
        members = [slot.member for slot in self.slots.values()]
        for member in members:
            platforms.kill_member(member)
        platforms.end_strays(members, (), self.run.run_dir if self.run else self.scratch_root, 0.0)

    # --- the loop -------------------------------------------------------------------------------
    def _on_control(self, request: Any) -> None:
        if not isinstance(request, dict):
            return
        op = request.get("op")
        if op == "spawn":
            self.waiting = request
            self.size = max(self.size, len(request["ranks"]))
        elif op == "signal":
            self._signal(request)
        elif op == "discard":
            run_folders.discard(self.scratch_root, request.get("path", ""))
        elif op == "warm":
            self.warm_wanted = True

    def serve(self) -> NoReturn:
        threading.Thread(target=self._read_control, daemon=True).start()
        while True:
            self._refill()
            self._start_waiting_run()
            if (
                self.warm_wanted
                and self.waiting is None
                and sum(s.state == "idle" for s in self.slots.values()) >= self.size
            ):
                self.warm_wanted = False
                self.link.send({"event": "warm"})
            kind, subject, detail = self.events.get()
            if kind == "control":
                self._on_control(subject)
            elif kind == "ready":
                self._on_ready(subject, detail)
            elif kind == "exit":
                self._on_exit(subject, detail)
            elif kind == "closed":
                self._kill_everything()
                os._exit(0)


def main() -> None:
    port, modules, scratch_root = int(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[3])
    token = sys.stdin.readline().strip()
    platforms.become_reaper()
    scratch_root.mkdir(parents=True, exist_ok=True)
    link = loopback.Framed(loopback.connect(port, token, loopback.CONTROL))
    Pool(link, modules, scratch_root).serve()


if __name__ == "__main__":
    main()
