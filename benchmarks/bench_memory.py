"""The grader's peak memory while W ranks attack it through their streams (issue 30: a rank made the
grader's process grow past 1 GB; Gradescope's default container has 768 MB; the target is 200 MB at W=4).

    PYTHONPATH=. python benchmarks/bench_memory.py [--world-size 4] [--megabytes 256] [--launcher fork]

Each case runs the engine in-process (`open_engine`, as `grader check` does) in a fresh Python process,
which prints its own peak RSS (`ru_maxrss` only grows, so one process per case). The grader is found
on PYTHONPATH, so an older checkout can be measured the same way. Cases, every rank of the run doing it:
- healthy: one all_reduce and a small report (the baseline).
- stdout flood: --megabytes of output.
- stack flood: --megabytes into the stack-dump pipe (found in the rank runtime's frame, as student
  code can), then a clean report.
- oversized report: a header that announces 300 MB, then --megabytes of body.
- report at the limits: a well-formed report of nearly 1 MiB and 32,000 strings, accepted.
- expanding report, 1 MiB: a well-formed report of 1 MiB, `[[],[],...]`, 22 MB of lists once decoded.
- expanding report, 8 MiB: the same at 8 MiB (within the 64 MiB the grader once accepted).

Measured 2026-11-28 on the 2-core machine (load 3-6), fork launcher, 256 MB per flooding rank, peak RSS of
the grader's process before the total caps (67cda99) and after:
    case                       W=4 before  W=4 after  W=8 after
    healthy                         33 MB      34 MB      34 MB
    stdout flood                    34 MB      34 MB      34 MB
    stack flood                    971 MB      34 MB      35 MB
    oversized report               354 MB      34 MB      33 MB
    report at the limits            53 MB      47 MB      62 MB
    expanding report, 1 MiB        162 MB      40 MB      45 MB
    expanding report, 8 MiB       1049 MB      34 MB      34 MB
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def cases(megabytes: int) -> dict[str, tuple[str, dict[str, int]]]:
    """name: (the ranks' worker, its arguments)."""
    return {
        "healthy": ("healthy", {}),
        "stdout flood": ("floods_stdout", {"megabytes": megabytes}),
        "stack flood": ("floods_stacks", {"megabytes": megabytes}),
        "oversized report": ("sends_an_oversized_report", {"megabytes": megabytes}),
        "report at the limits": ("sends_a_report_at_the_limits", {}),
        "expanding report, 1 MiB": ("sends_an_expanding_report", {"mebibytes": 1}),
        "expanding report, 8 MiB": ("sends_an_expanding_report", {"mebibytes": 8}),
    }


# --- the ranks' side ------------------------------------------------------------------------------
def _runtime_fd(name: str) -> int:
    frame: Any = sys._getframe()
    while name not in frame.f_locals:
        frame = frame.f_back
    return frame.f_locals[name]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _flood(fd: int, megabytes: int) -> None:
    chunk = b"x" * (1 << 20)
    for _ in range(megabytes):
        _write_all(fd, chunk)


def healthy(ctx: Any) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    ctx.init_group()
    total = torch.ones(1)
    dist.all_reduce(total)
    return {"sum": float(total[0])}


def floods_stdout(ctx: Any, megabytes: int) -> dict[str, Any]:
    _flood(1, megabytes)
    return {"done": True}


def floods_stacks(ctx: Any, megabytes: int) -> dict[str, Any]:
    _flood(_runtime_fd("stack_fd"), megabytes)
    return {"done": True}


def sends_an_oversized_report(ctx: Any, megabytes: int) -> None:
    fd = _runtime_fd("report_fd")
    _write_all(fd, struct.pack("!Q", 300 << 20))
    _flood(fd, megabytes)
    os._exit(0)


def sends_a_report_at_the_limits(ctx: Any) -> dict[str, Any]:
    """Nearly 1 MiB and 32,000 values: about the most a report the grader accepts can hold. Sent by the rank
    runtime (a report written into the channel by other code is refused before it is parsed: wire.ReportReader)."""
    return {"x": ["y" * 28] * 32_000}


def sends_an_expanding_report(ctx: Any, mebibytes: int) -> dict[str, Any]:
    """`[[],[],...]` of about `mebibytes`, sent by the rank runtime."""
    return {"x": [[] for _ in range((mebibytes << 20) // 3 - 100)]}


# --- the grader's side ----------------------------------------------------------------------------
def run_case(case: str, world_size: int, megabytes: int, launcher: str | None) -> dict[str, Any]:
    """One case in this process: what the ranks' outcomes say, and this process's peak RSS."""
    from grader.engine import Job, open_engine

    worker, kwargs = cases(megabytes)[case]
    engine = open_engine(["bench_memory"], launcher)
    try:
        engine.wait_warm()
        started = time.perf_counter()
        # a student file makes the job a rank beside student code: read within the grader's limits, not trusted
        result = engine.run(Job(f"bench_memory:{worker}", world_size, kwargs, Path(__file__), deadline=60.0))
        seconds = time.perf_counter() - started
    finally:
        engine.close()
    said = next((r.report_problem or str(r.error) for r in result.ranks if not r.ok), "every rank reported")
    return {
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "seconds": seconds,
        "said": said,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--megabytes", type=int, default=256, help="what each flooding rank writes")
    parser.add_argument("--launcher", choices=("fork", "portable"), default=None)
    parser.add_argument("--case", choices=cases(0), help=argparse.SUPPRESS)  # one case, in a child process
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    if args.case:
        print(json.dumps(run_case(args.case, args.world_size, args.megabytes, args.launcher)))
        return
    print(f"W={args.world_size}, {args.megabytes} MB per flooding rank, load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':<25} {'peak RSS':>9} {'run':>7}  what the grader said (of the first rank that failed)")
    for case in cases(args.megabytes):
        command = [sys.executable, __file__, "--case", case, "--world-size", str(args.world_size)]
        command += ["--megabytes", str(args.megabytes)] + (["--launcher", args.launcher] if args.launcher else [])
        child = subprocess.run(command, capture_output=True, text=True)
        if child.returncode != 0:
            print(f"{case:<25} {'-':>9} {'-':>7}  the grader's process failed: {child.stderr.strip()[-300:]}")
            continue
        row = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"{case:<25} {row['peak_mb']:>6.0f} MB {row['seconds']:>6.1f}s  {row['said'][:100]}")


if __name__ == "__main__":
    main()
