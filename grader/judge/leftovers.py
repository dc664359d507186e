"""What a check's runs left running after their ranks had exited, said in one sentence.

The engine kills such processes and names them (`RunResult.strays`); this turns the list into the
warning or failure a student reads: how many, what they ran, and the line that started them.
"""

from __future__ import annotations

from collections import Counter

from grader.engine import RunResult

SHOWN = 3


def stray_message(results: list[RunResult]) -> str:
    """ "" if no run left anything behind."""
    seen: dict[tuple[str, int], tuple[str, str]] = {}
    total = 0
    for result in results:
        total += result.stray_count
        for stray in result.strays:
            seen[(repr(result.job), stray.pid)] = (stray.command, stray.origin)
    if not total:
        return ""
    kinds = Counter(seen.values())
    parts = []
    for (command, origin), count in kinds.most_common(SHOWN):
        started = f", started from {origin}" if origin else ""
        parts.append(f"{count} x `{command or '?'}`{started}")
    more = f"; and {len(kinds) - SHOWN} other kinds" if len(kinds) > SHOWN else ""
    processes = "process" if total == 1 else "processes"
    return (
        f"your code left {total} {processes} running after its ranks had exited "
        f"({'; '.join(parts)}{more}): they were stopped. Wait for (or terminate) what you start"
    )
