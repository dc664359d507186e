"""The judge: what decides a check, in the grader's own process, from the facts the ranks report.

The check API (`api`), the runner that grades an exercise (`runner`), the verdict types (`verdict`),
the diagnoses (`diagnose`, `trajectory`, `samples`, `compare`, `writes`, `leftovers`). Nothing here
ever enters a sandbox or runs beside student code (grader/sandbox/rank_view.py draws the line).
"""
