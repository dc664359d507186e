"""What a launcher imports before any rank runs: the expensive part of every rank's start-up."""

from __future__ import annotations

import importlib

from grader.engine import tamper

# Imported by the zygote (or each pool interpreter) before any rank runs.
BASE_PRELOAD = (
    "numpy",
    "torch",
    "torch.distributed",
    "torch.nn.parallel",
    "torch.multiprocessing",
    "torch._dynamo",
    "torch.distributed.fsdp",
    "grader.engine.rank_runtime",
)


def import_all(modules: list[str]) -> dict[str, str]:
    """Import each module; the ones that failed, with why (a rank that needs one fails visibly). The grader's code they
    hold is then held as it is, for the ranks to compare with once the code under test has run (tamper.py)."""
    errors = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # reported to the grader, never raised here
            errors[name] = f"{type(exc).__name__}: {exc}"
    tamper.hold_grader_code()
    return errors
