"""The errors torch wraps in its own, unwrapped: each failing rank's or process's own first error, once.

torch reports a failure of several ranks or of a child process as one exception whose message holds the others'
tracebacks: DCP's CheckpointException ("CheckpointException ranks:dict_keys([0, 1])", then about 30 lines per
rank) and torch.multiprocessing's ProcessRaisedException ("-- Process 1 terminated with the following error:"
and the child's whole traceback). Said as it is, the student reads 60 lines, twice (the message, then the
traceback that repeats it). Here each wrapped failure becomes one line, "rank 1: ValueError: ...", with its own
traceback kept once. Rank side (the rank runtime reports it); duck-typed, so it imports nothing of torch.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass

_LAST_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)?): ?(?P<message>.*)$")


@dataclass(frozen=True)
class Wrapped:
    """One failure inside torch's exception: whose (a rank's, a process's), its error and its traceback."""

    who: str  # "rank 1", "process 0"
    type: str
    message: str
    traceback: str


def _dcp_failures(exc: BaseException) -> list[Wrapped] | None:
    """DCP's CheckpointException: `failures` maps each failing rank to (its exception, its StackSummary)."""
    failures = getattr(exc, "failures", None)
    if type(exc).__name__ != "CheckpointException" or not isinstance(failures, dict):
        return None
    found = []
    for rank, pair in sorted(failures.items(), key=lambda item: str(item[0])):
        inner = pair[0] if isinstance(pair, tuple) and pair else pair
        summary = pair[1] if isinstance(pair, tuple) and len(pair) > 1 else None
        if not isinstance(inner, BaseException):
            continue
        frames = "".join(traceback.format_list(summary)) if isinstance(summary, traceback.StackSummary) else ""
        only = "".join(traceback.format_exception_only(type(inner), inner))
        found.append(Wrapped(f"rank {rank}", type(inner).__name__, str(inner), frames + only))
    return found or None


def _spawned_failure(exc: BaseException) -> list[Wrapped] | None:
    """torch.multiprocessing's ProcessRaisedException: the child's traceback as text, after a header line."""
    if type(exc).__name__ != "ProcessRaisedException":
        return None
    text = str(exc)
    header, _, child = text.partition("terminated with the following error:\n")
    if not child:
        return None
    lines = [line for line in child.rstrip().splitlines() if line.strip()]
    last = next((m for m in map(_LAST_LINE.match, reversed(lines)) if m), None)
    kind, message = (last["type"].rsplit(".", 1)[-1], last["message"]) if last else ("Exception", lines[-1])
    index = getattr(exc, "error_index", None)
    who = f"process {index}" if isinstance(index, int) else "a child process"
    return [Wrapped(who, kind, message, child)]


def wrapped_failures(exc: BaseException) -> list[Wrapped]:
    """The failures torch wrapped in `exc`, each rank's or process's own; [] for any other exception."""
    return _dcp_failures(exc) or _spawned_failure(exc) or []


def short_message(failures: list[Wrapped]) -> str:
    """What torch's exception says without the tracebacks it wraps: each failure's own error in one line, the
    failures that raised the same error said once ("rank 0, rank 1: ValueError: ...")."""
    by_error: dict[str, list[str]] = {}
    for failure in failures:
        first = failure.message.splitlines()[0] if failure.message else ""
        by_error.setdefault(f"{failure.type}: {first}".rstrip(": "), []).append(failure.who)
    return "; ".join(f"{', '.join(who)}: {error}" for error, who in by_error.items())


def traceback_text(exc: BaseException, failures: list[Wrapped]) -> str:
    """`exc`'s own traceback ending in its short message, then each wrapped failure's traceback, once."""
    own = "".join(traceback.format_tb(exc.__traceback__))
    head = f"Traceback (most recent call last):\n{own}{type(exc).__name__}: {short_message(failures)}\n"
    return head + "".join(f"\n--- {f.who}'s own error ---\n{f.traceback.rstrip()}\n" for f in failures)
