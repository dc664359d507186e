"""Collective calls, logged per rank where its peers can read them, so that a mismatch is named in seconds.

Ranks that call different collectives (a barrier inside `if rank == 0:`, an all_reduce facing a
broadcast, other sizes or another root) otherwise wait out gloo's timeout, or one of them aborts.
Every rank appends each collective it starts through a `ProcessGroup` method (what `dist.*` and
the object collectives reach) to its own log in the run's folder, before the call: one JSON line,
one write. When a rank's latest call has waited longer than WATCH_AFTER_S, or when its worker raised
out of a collective, the rank reads its peers' logs and compares the calls of each group, the n-th
with the n-th. Calls differ when their operation differs, or, where every rank must agree, their
root or their tensors' element count and dtype. A peer that returned from its worker without
making the call it waits in has left the collectives. The finding, a `MISMATCH` fact with each
rank's call and line, is reported by the rank that found it; a watch that found it ends the rank at
once. It is a measurement; the judge words it (diagnose.py).

What Python does not see is not logged: calls C++ makes itself (DDP's reducer, FSDP1's and FSDP2's
autograd collectives), point-to-point messages (their counts differ between ranks in correct
code), and calls from DDP's own Python code (its join hooks shadow, on a rank that ran out of data,
the all-reduces the reducer makes in C++ on the others). Such calls are alike on every rank of
correct code, so the n-th logged call still meets the n-th. The functional collectives DTensor
makes (a full_tensor(), FSDP2's full state dict) are logged where a worker asks for them
(`watch_functional`), through the Python functions that start them.

A worker that goes on after the student's code returned, with collectives of its own, says so
(`returned_from`): its rank then counts as gone for its peers' watch, and it waits, without a
collective, until every peer is done with the student's code too, so that its own calls never meet
a call the student made on one rank only (and hide that mismatch).

Why the ProcessGroup's methods and not torch's dispatcher, where grader/rank/dispatched_collectives.py sees
every caller, C++ included (exercises 8, 13 and 14 count there): a TorchDispatchMode is called for every
tensor op of the thread it is on, and this watch is on every rank of every check. A mode that does no more
than test each op's namespace, entered before every worker (benchmarks/bench_dispatch_mode.py, `grader check
--solutions --all`, alternate rounds on 2 shared cores), raised the workers' CPU time from 10.7 s to 13.9 s
(medians of 3 rounds, +29%; 10.2 s to 12.7 s, +24%, in 5 other rounds), far past the ~5% the watch may cost;
the wall times (31.8 s and 45.7 s medians at load 7-12) vary too much there to show it either way.
"""

from __future__ import annotations

import json
import linecache
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from grader.engine import tamper
from grader.rank.patches import PROCESS_GROUP_COLLECTIVES

MISMATCH: Final = "collective_mismatch"  # the facts key of a rank that found one
FOLDER: Final = ".collectives"  # in the run's folder: one log per rank, named by its rank
WATCH_AFTER_S = 1.0  # a call waited on longer than this has its peers' calls compared with it
POLL_S = 0.2
SETTLE_S = 0.5  # once a mismatch is found, how long the group's other ranks may take to be accounted for
MAX_LOG_BYTES = 4 << 20  # calls beyond this are counted but not logged (they compare as unknown)
WATCHED = (*PROCESS_GROUP_COLLECTIVES, "barrier")
_DDP_SOURCE = os.path.join("torch", "nn", "parallel", "distributed.py")
_IN_CALL: Final = object()  # the Work of a call that has not returned yet

# torch.distributed's name for each ProcessGroup method, as the student wrote the call
DIST_NAMES: Final = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "allgather_coalesced": "all_gather_coalesced",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "all_gather_single_coalesced": "all_gather_into_tensor_coalesced",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_single_coalesced": "reduce_scatter_tensor_coalesced",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "all_to_all_single": "all_to_all_single",
    "alltoall_base": "all_to_all_single",
    "alltoall": "all_to_all",
}
# Where the tensors a rank contributes are among a method's arguments (after the group itself).
_INPUT_ARGUMENT = {"allreduce": 0, "allreduce_coalesced": 0, "broadcast": 0, "reduce": 0}
# Operations whose contributed tensors have the same element count and dtype on every rank of correct
# code; the others (all_gather's list, gather, scatter, all_to_all) may legitimately differ.
SIZED: Final = frozenset(
    {"all_reduce", "all_reduce_coalesced", "broadcast", "reduce", "all_gather_into_tensor", "reduce_scatter_tensor"}
)
# Operations with a root, and where the plain overload takes it as an int (after the group itself).
_ROOT_ARGUMENT = {"broadcast": 1, "reduce": 1, "scatter": 2, "gather": 2}
# torch.distributed._functional_collectives' collectives (DTensor's redistributions call them through the module), by
# the name their call is logged under; the tensors they contribute are their first argument. A broadcast's `src` is
# not compared: those calls are logged without a root.
FUNCTIONAL: Final = {
    "all_reduce": "all_reduce",
    "all_gather_single": "all_gather_into_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "all_to_all_single": "all_to_all_single",
    "broadcast": "broadcast",
    "all_reduce_coalesced": "all_reduce_coalesced",
    "all_gather_single_coalesced": "all_gather_into_tensor_coalesced",
    "reduce_scatter_single_coalesced": "reduce_scatter_tensor_coalesced",
}


@dataclass(frozen=True)
class Call:
    """One logged collective: what must agree between ranks, and the student's line that made it."""

    op: str
    root: int | None  # the root's global rank, where the operation has one
    numel: int | None
    dtype: str | None
    line: int  # of the innermost frame in the student's file; 0 where none is on the stack
    function: str

    def differs(self, other: Call) -> bool:
        if self.op != other.op or self.root != other.root:
            return True
        return self.op in SIZED and (self.numel, self.dtype) != (other.numel, other.dtype)

    def fact(self, rank: int, student_file: str | None) -> dict[str, Any]:
        code = linecache.getline(student_file, self.line).strip() if student_file and self.line else ""
        return {
            "rank": rank,
            "op": self.op,
            "root": self.root,
            "numel": self.numel,
            "dtype": self.dtype,
            "line": self.line,
            "function": self.function,
            "code": code,
        }


@dataclass
class Log:
    """What one rank's log says: its groups' members, its calls per group (by sequence number), and,
    once its worker is done, how it left ("returned" or "raised") with its count of calls per group."""

    rank: int
    global_rank: int | None = None
    members: dict[str, list[int] | None] = field(default_factory=dict)
    calls: dict[str, dict[int, Call]] = field(default_factory=dict)
    left: str = ""
    function: str = ""  # the student's function its worker called last, when it left
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, entry: list[Any]) -> None:
        kind = entry[0]
        if kind == "group":
            _, key, ranks, self.global_rank = entry
            self.members[key] = ranks
        elif kind == "call":
            _, key, seq, *described = entry
            self.calls.setdefault(key, {})[seq] = Call(*described)
        elif kind == "left":
            _, self.left, self.function, self.counts, global_rank = entry
            if global_rank is not None:
                self.global_rank = global_rank


def find_mismatch(mine: Log, peers: list[Log], pending: tuple[str, int] | None, student: str | None) -> dict | None:
    """The first call at which a peer's differs from this rank's, or, for the call this rank waits in
    (`pending`: group and sequence number), the peers of that group that left without making it.
    None where no difference is known: a peer that has not reached a call yet is never one."""
    first: tuple[str, int] | None = None
    for key, calls in list(mine.calls.items()):  # copies: the rank's main thread may log a call meanwhile
        for peer in peers:
            theirs = peer.calls.get(key, {})
            for seq in sorted(set(calls) & set(theirs)):
                if calls[seq].differs(theirs[seq]):
                    if first is None or seq < first[1]:
                        first = (key, seq)
                    break
    if first is not None:
        key, seq = first
        ranks = [log for log in (mine, *peers) if seq in log.calls.get(key, {})]
        return {
            "group_size": _size(mine.members.get(key)),
            "calls": [log.calls[key][seq].fact(log.rank, student) for log in sorted(ranks, key=lambda r: r.rank)],
        }
    if pending is None:
        return None
    key, seq = pending
    members = mine.members.get(key)
    gone = [
        peer
        for peer in peers
        if peer.left == "returned"
        and peer.counts.get(key, 0) <= seq
        and members is not None
        and (peer.global_rank if peer.global_rank is not None else peer.rank) in members
    ]
    if not gone or seq not in mine.calls.get(key, {}):
        return None
    waiting = [log for log in (mine, *peers) if seq in log.calls.get(key, {})]
    facts = [log.calls[key][seq].fact(log.rank, student) for log in waiting] + [
        {"rank": peer.rank, "returned": peer.function} for peer in gone
    ]
    return {"group_size": _size(members), "calls": sorted(facts, key=lambda f: f["rank"])}


def peers_done(mine: Log, counts: dict[str, int], peers: list[Log], world_size: int) -> bool | None:
    """Where the peers stand once this rank is done with the student's code, having made `counts` calls per group:
    True once every peer returned from it too; False once a peer raised, or made a call in a group this rank belongs
    to that this rank never made (the peer waits in a call nobody joins: its watch names it); None until then."""
    me = mine.global_rank if mine.global_rank is not None else mine.rank
    for peer in peers:
        if peer.left == "raised":
            return False
        for key, calls in list(peer.calls.items()):
            members = peer.members.get(key)
            if members is not None and me in members and any(seq >= counts.get(key, 0) for seq in list(calls)):
                return False
    if len(peers) == world_size - 1 and all(peer.left == "returned" for peer in peers):
        return True
    return None


def _size(members: list[int] | None) -> int | None:
    return len(members) if members is not None else None


class _PeerReader:
    """A peer's log, read from where the last read stopped (whole lines only)."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path = path
        self.log = Log(rank)
        self._offset = 0

    def read(self) -> Log:
        try:
            with open(self.path, "rb") as file:
                file.seek(self._offset)
                data = file.read(MAX_LOG_BYTES)
        except OSError:
            return self.log
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            try:
                self.log.add(json.loads(line))
            except Exception:  # a line of another format: written by code under test
                continue
        return self.log


def _numel_and_dtype(value: Any) -> tuple[int | None, str | None]:
    import torch

    tensors = [value] if isinstance(value, torch.Tensor) else value
    if not isinstance(tensors, (list, tuple)) or not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None, None
    return sum(t.numel() for t in tensors), str(tensors[0].dtype).removeprefix("torch.")


class Recorder:
    """Logs this rank's collective calls, and compares them with its peers' when one waits too long."""

    def __init__(self, run_dir: Path, rank: int, student_file: str | None) -> None:
        self.folder = run_dir / FOLDER
        self.rank = rank
        self.student_file = student_file
        self.on_mismatch: Callable[[dict[str, Any]], None] = lambda fact: None
        self._log = Log(rank)
        self._groups: weakref.WeakKeyDictionary[Any, tuple[str, list[int] | None]] = weakref.WeakKeyDictionary()
        self._generations: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._peers: dict[int, _PeerReader] = {}
        self._fd: int | None = None
        self._written = 0
        self._active = True
        # the last call logged: its group, sequence number, start, and Work (_IN_CALL until the call returns)
        self._latest: tuple[str, int, float, Any] | None = None
        self._watch: threading.Thread | None = None

    def install(self) -> None:
        """Wrap every collective method of ProcessGroup for the rank's life (a worker's own spies wrap these);
        a forked child (a DataLoader worker) logs nothing."""
        try:
            from torch._C._distributed_c10d import ProcessGroup
        except ImportError:  # a torch built without torch.distributed: no collective to watch
            return

        self.folder.mkdir(exist_ok=True)
        self._fd = os.open(self.folder / f"{self.rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for name in WATCHED:
            if hasattr(ProcessGroup, name):
                tamper.install(ProcessGroup, name, self._wrap(name, getattr(ProcessGroup, name)))
        os.register_at_fork(after_in_child=self._stop)

    def _stop(self) -> None:
        self._active = False

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        op = DIST_NAMES.get(name, name)
        recorder = self

        def collective(*args: Any, **kwargs: Any) -> Any:
            if not recorder._active or not args:
                return original(*args, **kwargs)
            at = recorder._record(op, name, args)
            if at is None:
                return original(*args, **kwargs)
            return recorder._watched(at, lambda: original(*args, **kwargs), lambda work: work)

        collective.__name__ = collective.__qualname__ = name
        collective.__doc__ = original.__doc__
        return collective

    def _watched(self, at: tuple[str, int], call: Callable[[], Any], pending: Callable[[Any], Any]) -> Any:
        """Make one logged call, `at` its group and sequence number, as the watch needs it: waited in while it runs
        (DETAIL's check waits inside the call itself), then until `pending(result)` is completed (a Work's wait)."""
        started = time.monotonic()
        self._latest = (*at, started, _IN_CALL)
        self._start_watch()
        try:
            result = call()
        except BaseException:
            self._latest = (*at, started, None)
            raise
        self._latest = (*at, started, pending(result))
        return result

    def _record(self, op: str, name: str, args: tuple[Any, ...]) -> tuple[str, int] | None:
        """Log one call of a ProcessGroup method before it starts; returns its group and sequence number (None: not
        logged)."""
        try:
            key, members = self._group(args[0])
            rest = args[1:]
            index = _INPUT_ARGUMENT.get(name, 1)
            numel, dtype = _numel_and_dtype(rest[index]) if len(rest) > index else (None, None)
            return self._log_call(key, op, self._root(name, rest, members), numel, dtype)
        except Exception:  # never fail the student's call: it only goes unlogged
            return None

    def _log_call(
        self, key: str, op: str, root: int | None, numel: int | None, dtype: str | None
    ) -> tuple[str, int] | None:
        """Log one call in the group `key`, with the student's line that made it; None for DDP's own calls."""
        line, function = 0, ""
        frame = sys._getframe(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.endswith(_DDP_SOURCE):
                return None  # DDP's own calls: see the module's docstring
            if filename == self.student_file:
                line, function = frame.f_lineno, frame.f_code.co_name
                break
            frame = frame.f_back  # type: ignore[assignment]
        call = Call(op, root, numel, dtype, line, function)
        seq = self._counts.get(key, 0)
        self._counts[key] = seq + 1
        self._append(["call", key, seq, call.op, call.root, call.numel, call.dtype, call.line, call.function])
        self._log.calls.setdefault(key, {})[seq] = call
        return key, seq

    def watch_functional(self) -> None:
        """Log the functional collectives too (FUNCTIONAL), for the rest of the rank's life. A call counts as waited
        in until its result is (an AsyncCollectiveTensor's wait), as the watch needs it."""
        if self._fd is None:
            return
        import inspect

        from torch.distributed import _functional_collectives as functional

        for name, op in FUNCTIONAL.items():
            original = getattr(functional, name, None)
            if original is not None:
                tamper.install(functional, name, self._wrap_functional(op, original, inspect.signature(original)))

    def _wrap_functional(self, op: str, original: Callable[..., Any], signature: Any) -> Callable[..., Any]:
        recorder = self

        def collective(*args: Any, **kwargs: Any) -> Any:
            at = recorder._record_functional(op, signature, args, kwargs) if recorder._active else None
            if at is None:
                return original(*args, **kwargs)
            return recorder._watched(at, lambda: original(*args, **kwargs), _Awaited)

        collective.__name__ = collective.__qualname__ = original.__name__
        collective.__doc__ = original.__doc__
        return collective

    def _record_functional(
        self, op: str, signature: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[str, int] | None:
        """Log one functional collective before it starts, in the group its `group` argument names."""
        try:
            from torch.distributed import _functional_collectives as functional
            from torch.distributed import distributed_c10d

            arguments = signature.bind(*args, **kwargs).arguments
            name = functional._resolve_group_name(arguments["group"], arguments.get("tag", ""))
            key, _ = self._group(distributed_c10d._resolve_process_group(name))
            numel, dtype = _numel_and_dtype(args[0] if args else None)
            return self._log_call(key, op, None, numel, dtype)
        except Exception:  # never fail the student's call: it only goes unlogged
            return None

    def _group(self, group: Any) -> tuple[str, list[int] | None]:
        """The group's key, alike on every member (its name, and which of this rank's groups of that name
        it is), and its members' global ranks; logged once per group."""
        known = self._groups.get(group)
        if known is not None:
            return known
        import torch.distributed as dist

        name = str(group.group_name)
        generation = self._generations[name] = self._generations.get(name, 0) + 1
        try:
            members: list[int] | None = list(dist.get_process_group_ranks(group))
            global_rank: int | None = dist.get_rank()
        except Exception:  # a group torch's registry does not know (built by hand)
            members, global_rank = None, None
        key = f"{name}#{generation}"
        self._groups[group] = (key, members)
        self._append(["group", key, members, global_rank])
        self._log.members[key] = members
        return key, members

    @staticmethod
    def _root(name: str, rest: tuple[Any, ...], members: list[int] | None) -> int | None:
        position = _ROOT_ARGUMENT.get(name)
        if position is None:
            return None
        root = next((a.rootRank for a in rest if hasattr(a, "rootRank")), None)
        if root is None and len(rest) > position and isinstance(rest[position], int):
            root = rest[position]
        if root is None:
            return None
        return members[root] if members is not None and 0 <= root < len(members) else int(root)

    def _append(self, entry: list[Any]) -> None:
        if self._fd is None:
            return
        data = (json.dumps(entry) + "\n").encode()
        if entry[0] != "left" and self._written + len(data) > MAX_LOG_BYTES:
            return
        try:
            self._written += os.write(self._fd, data)
        except OSError:  # the code under test closed it: the calls go unlogged
            self._fd = None

    def leave(self, how: str, function: str) -> None:
        """The worker returned or raised: this rank makes no collective call any more."""
        self._active = False
        global_rank = None
        try:
            import torch.distributed as dist

            global_rank = dist.get_rank() if dist.is_initialized() else None
        except Exception:  # a broken group: the rank it launched as stands for it
            pass
        if global_rank is not None:
            self._log.global_rank = global_rank
        self._append(["left", how, function, dict(self._counts), global_rank])

    def returned_from(self, function: str, world_size: int) -> bool:
        """The student's `function` returned on this rank, which makes no more collective calls of the student's code
        (its peers' watch names it as gone): wait until the peers are done with it too (`peers_done`). True when
        every rank returned from it, so that the worker's own collectives meet its peers' own; False when some peer
        still makes, or failed in, the student's calls. Without a log (no watch), True: nothing is known."""
        if self._fd is None:
            return True
        self.leave("returned", function)
        counts = dict(self._counts)
        while True:
            done = peers_done(self._log, counts, self._read_peers(), world_size)
            if done is not None:
                return done
            time.sleep(POLL_S / 10)

    # --- comparing with the peers --------------------------------------------------------
    def compare(self, pending: tuple[str, int] | None) -> dict[str, Any] | None:
        """A mismatch the logs show; once one does, the ranks that have neither made the call nor left yet
        get SETTLE_S to show theirs (peers that returned together exit one by one)."""
        fact = self._compare_now(pending)
        settled = time.monotonic() + SETTLE_S
        while fact is not None and len(fact["calls"]) < (fact["group_size"] or 0) and time.monotonic() < settled:
            time.sleep(POLL_S / 10)
            fact = self._compare_now(pending) or fact
        return fact

    def _compare_now(self, pending: tuple[str, int] | None) -> dict[str, Any] | None:
        return find_mismatch(self._log, self._read_peers(), pending, self.student_file)

    def _read_peers(self) -> list[Log]:
        """Every peer's log as far as it is written (none where the folder cannot be read)."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []
        for name in names:
            rank = name.removesuffix(".log")
            if rank.isdigit() and int(rank) != self.rank and int(rank) not in self._peers:
                self._peers[int(rank)] = _PeerReader(self.folder / name, int(rank))
        return [reader.read() for _, reader in sorted(self._peers.items())]

    def after_error(self, exc: BaseException) -> dict[str, Any] | None:
        """The mismatch behind an error raised out of a collective (gloo's timeout or lost connection,
        DETAIL's fingerprint check), if the logs show one; None for any other error."""
        if self._latest is None or not _from_collective(exc):
            return None
        key, seq, _, _ = self._latest
        try:
            return self.compare((key, seq))
        except Exception:  # a log it cannot read: the error is reported as it is
            return None

    def _start_watch(self) -> None:
        if self._watch is None:
            self._watch = threading.Thread(target=self._watching, name="grader-collective-watch", daemon=True)
            self._watch.start()

    def _watching(self) -> None:
        while self._active:
            time.sleep(POLL_S)
            latest = self._latest
            if latest is None or not self._active:
                continue
            key, seq, started, work = latest
            if time.monotonic() - started < WATCH_AFTER_S or _completed(work):
                continue
            try:
                fact = self.compare((key, seq))
            except Exception:  # a log it cannot read: no finding, as if the peer had not called yet
                continue
            if fact is not None and self._active:
                self.on_mismatch(fact)
                return


class _Awaited:
    """A functional collective's result as the watch reads a Work: completed once waited on (an
    AsyncCollectiveTensor's own flag; a plain tensor, or a list of them all waited on, is)."""

    def __init__(self, result: Any) -> None:
        self._results = result if isinstance(result, list) else [result]

    def is_completed(self) -> bool:
        return all(getattr(result, "completed", True) for result in self._results)


def _completed(work: Any) -> bool:
    if work is _IN_CALL:
        return False
    try:
        return work is None or bool(work.is_completed())
    except Exception:  # not a Work: nothing to wait for
        return True


def _from_collective(exc: BaseException) -> bool:
    """Whether the error came out of torch.distributed (a collective's call or its wait)."""
    marker = os.path.join("torch", "distributed", "")
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        trace = current.__traceback__
        while trace is not None:
            if marker in trace.tb_frame.f_code.co_filename:
                return True
            trace = trace.tb_next
        current = current.__cause__ or current.__context__
    return False
