"""The warm `grader check` (grader/warm.py): the second check runs on a zygote the daemon warmed, with
the results of a cold one; a new fingerprint gets a new daemon; an idle daemon leaves nothing behind;
nobody else reaches it. Each test has its own daemon folder and temp dir, and kills what it started."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grader import warm

REPO = Path(__file__).resolve().parent.parent
WARM_NOTE = re.compile(r"warm engine: zygote (\d+) from daemon (\d+)(?:, a new daemon \(([^)]*)\))?")


def _wait_exit(pid: int, timeout: float) -> bool:
    """True once `pid` has exited (it need not be our child)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _wait_for(path: Path, timeout: float = 30.0) -> None:
    give_up = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < give_up, f"{path} never appeared"
        time.sleep(0.05)


@pytest.fixture
def setting(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """An environment with warm checks on, in folders of this test's own; teardown ends every daemon
    and zygote started under them (their scratch folders are in this test's temp dir)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {
        **os.environ,
        "GRADER_WARM": "1",
        "GRADER_WARM_DIR": str(tmp_path / "warm"),
        "GRADER_WARM_IDLE": "60",
        "TMPDIR": str(temp),
        "PYTHONPATH": str(REPO),
    }
    yield {"env": env, "dir": tmp_path / "warm", "tmp": tmp_path}
    for pid in _processes_naming(str(tmp_path)):
        os.kill(pid, signal.SIGTERM)  # daemons end their zygotes
    give_up = time.monotonic() + 15
    while _processes_naming(str(tmp_path)) and time.monotonic() < give_up:
        time.sleep(0.1)
    for pid in _processes_naming(str(tmp_path)):
        os.kill(pid, signal.SIGKILL)


def _check(setting: dict[str, Any], name: str, *extra: str, env: dict[str, str] | None = None) -> tuple[str, list]:
    out = setting["tmp"] / f"{name}.json"
    command = [sys.executable, "-m", "grader", "check", "--solutions", "ex10", "--world-size", "2", "-v"]
    done = subprocess.run(
        [*command, "--json", str(out), *extra],
        env=env or setting["env"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = [(r["exercise"], r["check"], r["world_size"], r["status"]) for r in json.loads(out.read_text())]
    return done.stdout, results


def _served(out: str) -> tuple[int, int, str]:
    """(zygote, daemon, why a new daemon was started or "") from a check's -v note."""
    match = WARM_NOTE.search(out)
    assert match, out
    return int(match.group(1)), int(match.group(2)), match.group(3) or ""


def test_the_second_check_is_warm_equals_a_cold_one_and_a_new_fingerprint_gets_a_new_daemon(setting):
    cold, cold_results = _check(setting, "cold", "--no-warm")
    assert "warm engine" not in cold and cold_results
    assert not setting["dir"].exists()

    first, results = _check(setting, "first")
    zygote, daemon, why = _served(first)
    assert why == "no daemon was running" and results == cold_results
    assert stat.S_IMODE(setting["dir"].stat().st_mode) == 0o700
    assert _wait_exit(zygote, 10), "a zygote outlived its check"

    second, results = _check(setting, "second")
    assert _served(second)[1:] == (daemon, ""), second  # the same daemon's next zygote
    assert results == cold_results

    off, results = _check(setting, "off", env={**setting["env"], "GRADER_WARM": "0"})
    assert "warm engine" not in off and results == cold_results

    changed = {**setting["env"], "GRADER_SOME_SETTING": "changed"}  # in the fingerprint, like a grader edit
    stale, results = _check(setting, "stale", env=changed)
    _, fresh_daemon, why = _served(stale)
    assert why == "the grader, torch or the environment changed" and fresh_daemon != daemon
    assert results == cold_results
    assert _wait_exit(daemon, 15), "the stale daemon did not go"
    again, results = _check(setting, "again", env=changed)
    assert _served(again)[1:] == (fresh_daemon, "") and results == cold_results


def test_an_idle_daemon_exits_and_leaves_no_process(setting):
    """Started as a check starts it, with a 2 s idle time and a zygote that preloads nothing heavy."""
    env = {**setting["env"], "GRADER_WARM_IDLE": "2"}
    folder = warm.private_dir(setting["dir"])
    daemon = subprocess.Popen(
        [sys.executable, "-P", "-m", "grader.warm", str(folder), json.dumps(["json"]), "print"], env=env
    )
    _wait_for(folder / warm.SOCKET_NAME)
    answer, fds = warm._request(folder / warm.SOCKET_NAME, {"fingerprint": "print", "preload": ["json"]})
    assert answer.get("handed") and len(fds) == 2
    zygote = int(answer["pid"])
    for fd in fds:
        os.close(fd)  # the check is over: its zygote ends
    assert _wait_exit(zygote, 10)
    assert daemon.wait(timeout=20) == 0
    assert not (folder / warm.SOCKET_NAME).exists()
    time.sleep(0.5)
    assert _processes_naming(str(setting["tmp"])) == []


def test_a_wrong_fingerprint_is_refused_and_ends_the_daemon(setting):
    folder = warm.private_dir(setting["dir"])
    daemon = subprocess.Popen(
        [sys.executable, "-P", "-m", "grader.warm", str(folder), json.dumps(["json"]), "print"], env=setting["env"]
    )
    _wait_for(folder / warm.SOCKET_NAME)
    answer, fds = warm._request(folder / warm.SOCKET_NAME, {"fingerprint": "other", "preload": ["json"]})
    assert answer.get("stale") and fds == []
    assert daemon.wait(timeout=20) == 0


def test_a_folder_others_can_enter_or_a_symlink_is_refused(tmp_path, monkeypatch):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)
    with pytest.raises(warm.WarmError, match="open to other users"):
        warm.private_dir(open_dir)
    link = tmp_path / "link"
    private = warm.private_dir(tmp_path / "private")
    link.symlink_to(private)
    with pytest.raises(warm.WarmError, match="not a directory"):
        warm.private_dir(link)
    monkeypatch.setenv("GRADER_WARM_DIR", str(open_dir))
    engine, note = warm.warm_engine([])
    assert engine is None and "open to other users" in note
    assert not (open_dir / warm.SOCKET_NAME).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder of another user's and to be one")
def test_another_user_can_neither_use_nor_plant_a_folder(setting):
    theirs = setting["tmp"] / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(warm.WarmError, match="owned by uid 65534"):
        warm.private_dir(theirs)
    _check(setting, "first")
    path = setting["dir"] / warm.SOCKET_NAME
    _wait_for(path)
    setting["tmp"].chmod(0o755)  # only the daemon's own folder (0700) stands in the way
    pid = os.fork()
    if pid == 0:  # as user 65534 (another interpreter could not run from root's venv)
        code = 3
        try:
            os.setgid(65534)
            os.setuid(65534)
            socket.socket(socket.AF_UNIX).connect(str(path))
            code = 0
        except PermissionError:
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1, "another user reached the socket (or the probe broke)"
