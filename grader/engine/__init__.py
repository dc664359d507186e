"""Runs a function on W fresh rank processes and brings back what each one reported.

Parent side: `supervisor` (Engine, Job, RunResult). Rank side: `rank_runtime` (RankContext).
Between them: `zygote` (the warm template that forks ranks) and `wire` (the safe report format).
"""

from grader.engine.supervisor import Engine, EngineError, Job, RankOutcome, RunResult

__all__ = ["Engine", "EngineError", "Job", "RankOutcome", "RunResult"]
