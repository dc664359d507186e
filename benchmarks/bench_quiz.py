"""Time rendering 100 versions of a 40-question quiz in every format (target: under 5 s).

Run from the repository root:  PYTHONPATH=. python benchmarks/bench_quiz.py [--versions N] [--count K]
It draws the quiz from the course banks' exam pool with the CLI's own code path and writes to a
temporary directory, so the figure includes drawing, templating, notebook building, the QTI zips,
the Moodle variant pools and file writes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from grader.quiz.bank import load_banks
from grader.quiz.render import FORMATS, write_versions
from grader.quiz.versions import draw_all, select

BANK = Path(__file__).resolve().parent.parent / "quizzes"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=100)
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported")
    args = parser.parse_args()
    bank = load_banks(BANK)
    questions = select(bank.questions, args.seed, count=args.count, pool="exam")
    timings = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            versions = draw_all(questions, args.seed, args.versions, pool="exam")
            files = write_versions(versions, list(FORMATS), Path(tmp))
            timings.append(time.perf_counter() - start)
    print(
        f"{args.versions} versions x {len(questions)} questions, formats {', '.join(FORMATS)} + keys: "
        f"{len(files)} files; best {min(timings):.2f} s, worst {max(timings):.2f} s over {args.repeat} runs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
