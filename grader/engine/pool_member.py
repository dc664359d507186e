"""One interpreter of the portable launcher's warm pool (pool.py): it imports what every rank
needs, says it is ready, then becomes one rank of one run and exits with it. A member is never
reused, so every rank still starts from a pristine interpreter, as a forked one does.

    python -P -m grader.engine.pool_member PRELOAD_JSON POOL_HOST_PID

stdin carries the pool host's commands: first the assignment, one JSON line
    {"spec": RANK_SPEC (with its run folder), "port": GRADER_PORT, "token": RUN_TOKEN}
then, where no signal asks for stacks (Windows), "stack" lines; its end means the host is gone.
stdout carries one line, {"ready": true, "preload_errors": {...}}, and nothing after it.
"""

from __future__ import annotations

import json
import os
import sys
import threading

from grader.engine import loopback, platforms, preload
from grader.engine.contract import RankSpec


def main() -> None:
    modules, host = json.loads(sys.argv[1]), int(sys.argv[2])
    platforms.die_with_parent(host)
    commands = os.fdopen(os.dup(0), "rb")  # code under test reading stdin must not eat a command
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 0)
    errors = preload.import_all(modules)
    os.write(1, (json.dumps({"ready": True, "preload_errors": errors}) + "\n").encode())
    os.dup2(quiet, 1)  # the ready pipe closes here: the host reads nothing more from it
    os.close(quiet)
    line = commands.readline()
    if not line:
        platforms.end_self()
    assignment = json.loads(line)
    spec: RankSpec = assignment["spec"]
    streams = [
        loopback.connect(assignment["port"], assignment["token"], role, spec["rank"])
        for role in (loopback.OUTPUT, loopback.REPORT, loopback.STACK)
    ]
    (out_fd, report_fd, stack_fd), before_exit = platforms.rank_fds(streams)
    threading.Thread(target=platforms.dump_stacks_on_request, args=(commands, stack_fd), daemon=True).start()
    from grader.engine.rank_runtime import run_rank

    run_rank(spec, out_fd, report_fd, stack_fd, before_exit)


if __name__ == "__main__":
    main()
