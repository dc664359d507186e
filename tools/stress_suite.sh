#!/usr/bin/env bash
# The test suite N times in a row under `pytest -n auto`, with `grader check --solutions --all` looping beside
# it the whole time (issue 21: the suite must hold under a student's check loop). Not part of the default
# tests. Prints each run's outcome and time, and how many check-loop iterations ran and failed.
#   bash tools/stress_suite.sh [runs]     (from the repository root, in the project's venv)
set -u
runs=${1:-5}
log=$(mktemp -d)
(
    while :; do
        n=$((${n:-0} + 1))
        if python -m grader check --solutions --all --no-warm >"$log/check.out" 2>&1; then
            echo ok
        else
            echo FAIL
            cp "$log/check.out" "$log/check-failed-$n.out"  # kept: a failing check with a solution is a false failure
        fi
    done >"$log/loop"
) &
loop=$!
trap 'kill $loop 2>/dev/null; wait $loop 2>/dev/null' EXIT
failed=0
for run in $(seq 1 "$runs"); do
    start=$(date +%s)
    if GRADER_WARM=0 python -m pytest -q -n auto -p no:cacheprovider tests >"$log/run$run" 2>&1; then
        outcome=passed
    else
        outcome=FAILED
        failed=$((failed + 1))
    fi
    echo "run $run: $outcome in $(($(date +%s) - start)) s: $(tail -n 1 "$log/run$run")"
done
kill $loop 2>/dev/null
wait $loop 2>/dev/null
echo "check loop beside it: $(grep -c . "$log/loop") runs, $(grep -c FAIL "$log/loop") failed; logs in $log"
for failed_check in "$log"/check-failed-*.out; do
    [ -e "$failed_check" ] && { echo "--- $failed_check"; grep -E "FAIL|ERROR" "$failed_check"; }
done
[ "$failed" -eq 0 ]
