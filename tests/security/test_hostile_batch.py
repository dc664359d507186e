"""A sandboxed batch holding every attack of hostile.py beside honest submissions: each attacker
gets only what its honest content deserves, no other submission's verdict or files change, nothing
secret reaches any result, the course is untouched, nothing outlives the batch, and every
submission has its row."""

from __future__ import annotations

import csv
import hashlib
import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from instructor import support

from security.hostile import ATTACKS, EX03, FULL, MARKER, victim

SECRET_VARIABLE = "GRADER_TEST_SECRET"
SECRET_VALUE = "s3cret-token-4b1d"


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


class _Listener:
    """A server on the host's loopback that no sandboxed submission should ever reach."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections += 1
            connection.close()


def _marked_processes() -> list[str]:
    found = subprocess.run(["pgrep", "-af", f"{MARKER}|9{len(MARKER)}7"], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


@pytest.fixture(scope="module")
def batch(bwrap_available, hidden_course: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("hostile")
    out = folder / "out"
    listener = _Listener()
    context = {
        "tmp": str(folder.parent),
        "course": str(hidden_course),
        "out": str(out),
        "marker": MARKER,
        "marker_number": f"{len(MARKER)}7",
        "port": str(listener.port),
    }
    subs = folder / "submissions"
    victim(subs / "a_victim_first")
    for attack in ATTACKS:
        attack.write(subs / attack.name, context)
    victim(subs / "z_victim_last")
    before = _digest(hidden_course)
    secrets = {
        "solution": (hidden_course / "solutions" / EX03).read_text().splitlines()[-8].strip(),
        "hidden check": "if other == public:",  # a line of ex02's hidden.py
        "passwd": "root:x:0:0",
        "environment": SECRET_VALUE,
    }
    assert (
        all(secrets[k] for k in secrets)
        and secrets["hidden check"] in (hidden_course / "grader/checks/ex02_data_sharding/hidden.py").read_text()
    )
    started = time.monotonic()
    done = support.run_grader(
        hidden_course,
        "grade",
        *sorted(map(str, subs.iterdir())),
        "--out",
        str(out),
        "-j",
        "2",
        "--world-size",
        "2",
        "--deadline",
        "8",
        "--timeout",
        "90",
        env={SECRET_VARIABLE: SECRET_VALUE},
    )
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    results = {p.parent.name: p.read_text() for p in out.glob("*/results.json")}
    time.sleep(2.0)  # anything left behind would now rewrite the results
    return {
        "out": out,
        "results": results,
        "before": before,
        "course": hidden_course,
        "secrets": secrets,
        "listener": listener,
        "seconds": seconds,
        "names": sorted(p.name for p in subs.iterdir()),
        "stdout": done.stdout,
    }


def _gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "gradebook.csv", newline="") as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


def _points(row: dict[str, str], exercise_file: str) -> float:
    return float(row[exercise_file.removesuffix(".py")])


def test_every_submission_has_a_row(batch):
    assert sorted(_gradebook(batch["out"])) == batch["names"], batch["stdout"]


@pytest.mark.parametrize("name", ["a_victim_first", "z_victim_last"])
def test_honest_submissions_keep_their_full_score_and_files(batch, name):
    row = _gradebook(batch["out"])[name]
    assert {f: _points(row, f) for f in FULL} == FULL, row
    data = json.loads(batch["results"][name])
    assert data["score"] == sum(FULL.values())


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_an_attack_gains_nothing(batch, attack):
    row = _gradebook(batch["out"])[attack.name]
    assert {f: _points(row, f) for f in attack.deserves} == attack.deserves, row


def test_no_secret_reaches_any_result(batch):
    for name, text in batch["results"].items():
        for what, secret in batch["secrets"].items():
            assert secret not in text, f"{what} leaked into {name}/results.json"
    gradebook = (batch["out"] / "gradebook.csv").read_text()
    assert not any(secret in gradebook for secret in batch["secrets"].values())


def test_results_are_not_rewritten_after_the_batch(batch):
    now = {p.parent.name: p.read_text() for p in batch["out"].glob("*/results.json")}
    assert now == batch["results"]


def test_the_course_is_untouched(batch):
    assert _digest(batch["course"]) == batch["before"]


def test_nothing_outlives_the_batch(batch):
    assert _marked_processes() == []


def test_no_submission_reached_the_hosts_network(batch):
    assert batch["listener"].connections == 0


@pytest.mark.parametrize(
    "name, said",
    [
        ("sends_a_deeply_nested_report", "channel was written by something other than the grader's rank runtime"),
        ("sends_an_oversized_report", "is 1,048,576 MB, over the grader's limit of 1 MB"),
        ("forges_its_report_on_the_channel", "channel was written by something other than the grader's rank runtime"),
    ],
)
def test_a_damaged_report_fails_its_own_run_only(batch, name, said):
    """(The later exercises of the same submission, on the same engine, grade as they deserve:
    test_an_attack_gains_nothing.)"""
    tests = json.loads(batch["results"][name])["tests"]
    ex01 = [t for t in tests if t["name"].startswith("ex01")]
    assert ex01 and all(t["score"] == 0 for t in ex01), ex01
    first, *others = ex01  # the first check on the damaged run says why; the others sharing it point there
    assert said in first["output"], ex01
    assert all(said in t["output"] or "(a knock-on:" in t["output"] for t in others), ex01


def test_the_forgeries_are_marked_for_review_and_no_other_submission(batch):
    """Their rows keep the points they deserve (test_an_attack_gains_nothing); the marks are said beside them."""
    rows = _gradebook(batch["out"])
    assert {name for name, row in rows.items() if row["review"]} == {a.name for a in ATTACKS if a.marked}, rows
    assert f"{sum(a.marked for a in ATTACKS)} submission(s) marked for review" in batch["stdout"]
