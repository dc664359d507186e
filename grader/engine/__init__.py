"""Runs a function on W fresh rank processes and brings back what each one reported.

Shared by every launcher and caller: `contract` (Job, RunResult, the `Runner` protocol). Parent side:
`supervisor` (Engine), made and started by `opening.open_engine`. Rank side: `rank_runtime` (RankContext).
Between them: `zygote` (the warm template that forks ranks) and `wire` (the safe report format).
"""

from grader.engine.contract import DEFAULT_DEADLINE_S, EngineError, Job, RankOutcome, RankSpec, Runner, RunResult
from grader.engine.opening import open_engine
from grader.engine.supervisor import Engine

__all__ = [
    "DEFAULT_DEADLINE_S",
    "Engine",
    "EngineError",
    "Job",
    "RankOutcome",
    "RankSpec",
    "RunResult",
    "Runner",
    "open_engine",
]
