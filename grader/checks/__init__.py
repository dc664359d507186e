"""The exercises' checks: one package per exercise, split along the trust boundary.

The judge they use is grader/judge/; the rank-side helpers their workers share are grader/rank/.
Each package's `manifest.toml` lists its files by side (grader/checks/manifest.py reads it); a file
it does not list never enters a sandbox:

- `rank`: `workers.py` and the helpers it imports run on the ranks, beside student code, and report
  raw facts. With `__init__.py`, they are all of an exercise that enters a sandbox (see
  grader/sandbox/rank_view.py).
- `judge`: `checks.py` and its own helpers and data judge those facts in the grader's own process.
  Students may read them (a release ships them for the public checks); they never enter a sandbox.
- `secret`: `hidden.py` (hidden checks) and `answers.py` (closed forms and reference values): never
  in a sandbox, never in a release.
"""
