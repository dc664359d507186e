"""Who wrote a checkpoint, judged from what each rank did (events of grader.rank.write_recorder),
never from how the call was spelled.

A rank puts a file at a path by `torch.save` to the path, by opening the path for writing (a
handle given to torch.save, bytes written by hand), or by renaming or linking another file onto
it (a temporary file, then os.replace). Each such event is a landing; the last one is the file
that is there now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Events = Sequence[Mapping[str, Any]]  # one rank's events: its typed facts or plain dicts


@dataclass(frozen=True)
class Landing:
    rank: int
    time: float  # when the file was complete at the path


def _landing_time(events: Events, index: int) -> float:
    """A file opened for writing is complete when the serializations into it have ended."""
    event = events[index]
    if event["op"] == "save":
        return event["end"] if "end" in event else event["start"]
    if event["op"] != "write":
        return event["time"]
    landed = event["time"]
    for later in events[index + 1 :]:
        if later.get("path") != event["path"]:
            continue
        if later["op"] == "write":
            break
        if later["op"] == "save" and later["into"] == "file":
            landed = max(landed, later.get("end", later["start"]))
    return landed


def _lands_at(event: Mapping[str, Any], path: str) -> bool:
    if event["op"] == "save":
        return event["into"] == "path" and event["path"] == path
    if event["op"] == "write":
        return event["path"] == path
    return event["op"] in ("rename", "link") and event.get("to") == path


def landings(ranks_events: Sequence[Events], path: str) -> list[Landing]:
    """Every time a rank put a file at `path`, in time order."""
    found = [
        Landing(rank, _landing_time(events, i))
        for rank, events in enumerate(ranks_events)
        for i, event in enumerate(events)
        if _lands_at(event, path)
    ]
    return sorted(found, key=lambda landing: landing.time)


def landed_at(ranks_events: Sequence[Events], path: str) -> float | None:
    """When the file now at `path` was complete there, or None if no rank put one there."""
    found = landings(ranks_events, path)
    return found[-1].time if found else None


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def writers_problem(ranks_events: Sequence[Events], path: str, exists: bool, once: bool) -> str:
    """What is wrong with who wrote the checkpoint at `path`, or "" when rank 0 alone wrote it (and
    only once, if `once`). `exists`: whether a file is at the path now."""
    name = Path(path).name
    found = landings(ranks_events, path)
    writers = sorted({landing.rank for landing in found})
    world_size = len(ranks_events)
    if world_size > 1 and writers == list(range(world_size)):
        return (
            f"every rank saving: each of the {world_size} ranks wrote the checkpoint {name}; only rank 0 writes "
            "(the weights are the same everywhere, and several writers of one file can corrupt it)"
        )
    if writers and 0 not in writers:
        return (
            f"{_ranks(writers)} wrote the checkpoint {name}, and rank 0 did not: rank 0 alone writes it "
            "(`if rank == 0:` / `dist.get_rank() == 0`)"
        )
    if len(writers) > 1:
        return f"{_ranks(writers)} wrote the checkpoint {name}; only rank 0 writes it"
    elsewhere = {
        rank: sorted(
            {
                Path(e["path"]).name
                for e in events
                if e["op"] == "save" and e["into"] != "memory" and e["path"] and e["path"] != path
            }
        )
        for rank, events in enumerate(ranks_events)
    }
    others = [rank for rank in range(1, world_size) if elsewhere[rank]]
    if others:
        rank = others[0]
        return f"rank {rank} also saved a checkpoint ({', '.join(elsewhere[rank])}); only rank 0 writes one"
    if not writers:
        if exists:
            return (
                f"a file is at {name}, but no rank was seen writing it (the grader watches torch.save and the "
                "files each rank opens for writing, renames or links)"
            )
        saved = elsewhere[0]
        if saved:
            return f"rank 0 did not save to the path it was given ({name}); it saved to {', '.join(saved)}"
        return f"no rank wrote the checkpoint {name}: no torch.save into a file, and no file written at that path"
    if once and len(found) > 1:
        return f"rank 0 wrote the checkpoint {name} {len(found)} times; it is written once"
    return ""


def went_on_early(ranks_events: Sequence[Events], path: str, hosts: list[str], moments: list[list[float]]) -> list[int]:
    """The ranks that went on (returned, loaded) before the file at `path` landed: those a held save
    of rank 0 saw move on before it began (causal proof), and those whose clock shows one of their
    `moments` before the landing, when they ran on the host that wrote it (other clocks may be skewed)."""
    early = {rank for event in ranks_events[0] if event["op"] == "save" for rank in event.get("moved_on_before", [])}
    found = landings(ranks_events, path)
    if found:
        last = found[-1]
        early |= {
            rank
            for rank, times in enumerate(moments)
            if rank != last.rank and hosts[rank] == hosts[last.rank] and any(t < last.time for t in times)
        }
    return sorted(early)


def barrier_callers(ranks_events: Sequence[Events], early: list[int]) -> str:
    """Who called a barrier, when that is why ranks in `early` went on before the checkpoint landed
    (some ranks called one, these did not: a barrier only some ranks reach, such as one inside
    `if rank == 0:`); "" otherwise. Other ways to wait (an all_reduce, store.wait) are not barriers:
    the record only words the failure, it is never required."""
    called: dict[int, set[str]] = {}
    for rank, events in enumerate(ranks_events):
        names = {e["name"] for e in events if e["op"] == "barrier"}
        if names:
            called[rank] = names
    skipped = [rank for rank in early if rank not in called]
    if not called or not skipped:
        return ""
    spelled = sorted(set().union(*called.values()))
    inside = " (inside the `if rank == 0:`?)" if list(called) == [0] else ""
    return (
        f"only {_ranks(list(called))} called {' or '.join(f'dist.{n}()' for n in spelled)}{inside}; "
        f"{_ranks(skipped)} never did"
    )
