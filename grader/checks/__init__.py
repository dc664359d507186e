"""The exercises' checks: one package per exercise, split along the trust boundary.

The judge they use is grader/judge/; the rank-side helpers their workers share are grader/rank/.

- `workers.py` (and helpers beside it) runs on the ranks, beside student code: it reports raw facts.
  It is the only part of an exercise that enters a sandbox (see grader/sandbox/rank_view.py).
- `checks.py` judges those facts in the grader's own process. Students may read it (a release
  ships it for the public checks); it never enters a sandbox.
- `hidden.py` (hidden checks) and `answers.py` (closed forms and reference values) are the
  secrets: never in a sandbox, never in a release.
"""

JUDGE_MODULES = ("checks.py",)
SECRET_MODULES = ("hidden.py", "answers.py")
