"""Checks: one package per exercise, with `workers.py` (runs on the ranks, touches student code)
and `checks.py` (runs in the grader, judges the facts the workers report)."""
