"""A student's `grader check` on a shared machine: another local user who finds the port of the rendezvous
store rank 0 hosts, and writes and deletes its keys while the check runs, cannot make a correct solution
fail. The ranks run in a network namespace of their own (grader/private_network.py): the port is not on
the machine's loopback at all. Where the system refuses such namespaces the test skips (and `grader doctor`
warns), except under CI."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grader import doctor, private_network

REPO = Path(__file__).resolve().parents[2]
EXERCISES = ("ex01", "ex02", "ex03")  # each forms its group at the grader's rendezvous (env://)


class Intruder(threading.Thread):
    """Joins every rendezvous store whose port a check publishes below `root`, and spoils its keys."""

    def __init__(self, root: Path) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.stop = threading.Event()
        self.joined: set[int] = set()
        self.spoiled = 0

    def run(self) -> None:
        from torch.distributed import TCPStore

        stores: dict[int, TCPStore] = {}
        while not self.stop.is_set():
            for folder, _, files in os.walk(self.root):  # run folders come and go: errors are skipped
                try:
                    port = int((Path(folder) / "rendezvous.port").read_text()) if "rendezvous.port" in files else 0
                except (OSError, ValueError):
                    continue
                if not port:
                    continue
                if port not in stores and port not in self.joined:
                    self.joined.add(port)
                    try:
                        timeout = datetime.timedelta(seconds=1)
                        stores[port] = TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
                    except Exception:  # nothing listens there: the store is out of reach
                        continue
            for port, store in list(stores.items()):
                try:
                    for key in store.list_keys():
                        store.set(key, "spoiled")
                        store.delete_key(key)
                        self.spoiled += 1
                    for rank in range(4):
                        store.set(f"default_pg/0//cpu//0/{rank}", "spoiled")
                except Exception:
                    stores.pop(port)
            time.sleep(0.001)


def check(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], Intruder]:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    intruder = Intruder(scratch)
    intruder.start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "grader", "check", *EXERCISES, "--solutions", "--no-warm", "--world-size", "2"],
            cwd=REPO,
            env={**os.environ, **env, "TMPDIR": str(scratch), "NO_COLOR": "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        intruder.stop.set()
        intruder.join()
    return done, intruder


def test_an_intruder_on_the_loopback_cannot_spoil_a_check(tmp_path: Path) -> None:
    problem = private_network.unavailable()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"a check's private network must be tested under CI: {problem}")
        pytest.skip(problem)
    done, intruder = check(tmp_path, {})
    assert intruder.joined, "the intruder never found a rendezvous port"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert intruder.spoiled == 0


def test_doctor_warns_where_a_check_would_share_the_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(private_network.VARIABLE, "0")
    private_network.unavailable.cache_clear()
    try:
        finding = doctor.rendezvous_finding()
    finally:
        private_network.unavailable.cache_clear()
    assert finding.status == "WARN" and "another user of this machine could join" in finding.detail
