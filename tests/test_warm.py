"""The warm `grader check` (grader/warm.py): the second check runs on a zygote the daemon warmed, with
the results of a cold one; a new fingerprint gets a new daemon; an idle daemon leaves nothing behind;
nobody else reaches it. Each test has its own daemon folder and temp dir, and kills what it started."""

from __future__ import annotations

import itertools
import json
import os
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grader import warm
from grader.engine import Engine, EngineError, Job
from grader.engine.launchers import ZygoteLink
from grader.engine.platforms import UNTIED

REPO = Path(__file__).resolve().parent.parent
ENGINE_TESTS = REPO / "tests" / "engine"
FAULTS = ENGINE_TESTS / "fault_workers.py"
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


# --- a daemon that goes (stale, closed or killed) never takes a running check's zygote with it ----------


def _start_daemon(setting: dict[str, Any]) -> tuple[subprocess.Popen[bytes], Path]:
    """A daemon as a check starts it, with a zygote that preloads nothing heavy; its ranks can run the
    engine tests' fault workers."""
    folder = warm.private_dir(setting["dir"])
    env = {**setting["env"], "PYTHONPATH": os.pathsep.join([str(REPO), str(ENGINE_TESTS)])}
    daemon = subprocess.Popen(
        [sys.executable, "-P", "-m", "grader.warm", str(folder), json.dumps(["json"]), "print"], env=env
    )
    _wait_for(folder / warm.SOCKET_NAME)
    return daemon, folder


def _adopt(answer: dict[str, Any], fds: list[int]) -> Engine:
    """What `warm.warm_engine` does with a handed zygote: an engine on it, ready."""
    assert answer.get("handed") and len(fds) == 2, answer
    engine = Engine(launcher="fork")
    log = os.fdopen(fds[1], "w+b")
    engine.adopt(socket.socket(fileno=fds[0]), warm.AdoptedZygote(int(answer["pid"])), log, answer["scratch"])
    engine.wait_ready()
    return engine


def _healthy_run_passes(engine: Engine) -> None:
    result = engine.run(Job("fault_workers:healthy", 2, student_file=FAULTS, deadline=60.0))
    assert result.ok, [(rank.error, rank.output) for rank in result.ranks]
    assert [float(rank.facts["sum"][0]) for rank in result.ranks] == [3.0, 3.0]


def test_a_stale_daemon_lets_the_running_check_finish_on_its_zygote_then_exits(setting):
    daemon, folder = _start_daemon(setting)
    answer, fds = warm._request(folder / warm.SOCKET_NAME, {"fingerprint": "print", "preload": ["json"]})
    engine = _adopt(answer, fds)
    zygote = int(answer["pid"])
    try:
        stale, _ = warm._request(folder / warm.SOCKET_NAME, {"fingerprint": "other", "preload": ["json"]})
        assert stale.get("stale")
        assert not (folder / warm.SOCKET_NAME).exists()  # removed before it answered: the next check starts anew
        assert not _wait_exit(daemon.pid, 1.0), "the stale daemon did not wait for the check on its zygote"
        _healthy_run_passes(engine)
        assert daemon.poll() is None and not _wait_exit(zygote, 0)
    finally:
        engine.close()  # the check ends: it closes its line
    assert _wait_exit(zygote, 10), "the handed zygote outlived its check's line"
    assert daemon.wait(timeout=10) == 0
    assert not Path(answer["scratch"]).exists()
    assert _processes_naming(str(setting["tmp"])) == []


def test_a_handed_zygote_outlives_a_killed_daemon_and_its_idle_zygote_does_not(setting):
    daemon, folder = _start_daemon(setting)
    answer, fds = warm._request(folder / warm.SOCKET_NAME, {"fingerprint": "print", "preload": ["json"]})
    engine = _adopt(answer, fds)
    try:
        zygote = int(answer["pid"])
        daemon.kill()
        daemon.wait()
        time.sleep(0.5)  # a parent-death signal would have landed by now
        assert not _wait_exit(zygote, 0), "the handed zygote died with the daemon"
        _healthy_run_passes(engine)
        with pytest.raises(EngineError) as lost:  # the report says what was measured when a launcher goes
            engine.run(Job("fault_workers:kills_the_launcher", 2, student_file=FAULTS, deadline=60.0))
        assert re.search(
            r"stopped unexpectedly \(a zygote from the warm daemon: its exit status is the daemon's to read\), "
            r"\d+\.\d s after it was ready, during run\d+ \(fault_workers:kills_the_launcher on 2 ranks\)",
            str(lost.value),
        ), lost.value
    finally:
        engine.close()

    (folder / warm.SOCKET_NAME).unlink()  # the killed daemon's, as a new daemon would
    daemon, folder = _start_daemon(setting)  # its first zygote warms; no check takes it
    idle = _processes_naming(str(setting["tmp"] / "tmp" / "grader-scratch-"))
    assert len(idle) == 1, idle
    daemon.kill()
    daemon.wait()
    assert _wait_exit(idle[0], 15), "an idle zygote outlived its daemon"


def test_an_untied_zygote_whose_line_closes_before_it_is_ready_ends_cleanly(tmp_path):
    """Nothing kills it with its parent: it learns that its check is gone when it says it is ready."""
    link = ZygoteLink()
    with tempfile.TemporaryFile(dir=tmp_path) as log:
        process = link.launch([json.dumps(["json"]), str(tmp_path / "scratch"), UNTIED], dict(os.environ), log, None)
        link.close()
        assert process.wait(timeout=30) == 0
        log.seek(0)
        assert log.read() == b""


CHECK_THAT_HANGS = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_warm import _adopt
from grader import warm
from grader.engine import Job
answer, fds = warm._request(Path({socket!r}), {{"fingerprint": "print", "preload": ["json"]}})
engine = _adopt(answer, fds)
print(answer["pid"], flush=True)
engine.run(Job("fault_workers:hangs", 2, {{"pid_file": {pid_file!r}}}, student_file=Path({faults!r}), deadline=300))
"""


def test_a_killed_check_leaves_no_zygote_and_no_process_of_its_run(setting):
    daemon, folder = _start_daemon(setting)
    pid_file = str(setting["tmp"] / "grandchild")
    script = CHECK_THAT_HANGS.format(
        tests=str(REPO / "tests"), socket=str(folder / warm.SOCKET_NAME), pid_file=pid_file, faults=str(FAULTS)
    )
    env = {**setting["env"], "PYTHONPATH": os.pathsep.join([str(REPO), str(ENGINE_TESTS)])}
    check = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert check.stdout is not None
        zygote = int(check.stdout.readline())
        for rank in range(2):
            _wait_for(Path(f"{pid_file}.{rank}"), timeout=60)
        below = [int(Path(f"{pid_file}.{rank}").read_text()) for rank in range(2)]  # what each rank started
        assert not any(_wait_exit(pid, 0) for pid in [zygote, *below])
    finally:
        check.kill()
        check.wait()
    for pid in [zygote, *below]:
        assert _wait_exit(pid, 10), f"process {pid} outlived the killed check"
    assert daemon.poll() is None  # the daemon goes on serving the next check


def test_closing_never_cuts_short_a_check_on_a_handed_zygote_however_long_it_runs(tmp_path, monkeypatch):
    """The daemon's clock runs a minute a reading, past any grace it could give; its zygote serves on."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(ENGINE_TESTS)]))
    readings = itertools.count()
    real = time.monotonic
    monkeypatch.setattr(warm, "time", SimpleNamespace(monotonic=lambda: real() + 60 * next(readings), sleep=time.sleep))
    daemon = warm.Daemon(tmp_path, ["json"], "print", idle=60.0)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.sendall(json.dumps({"fingerprint": "print", "preload": ["json"]}).encode() + b"\n")
        assert daemon._answer(theirs) == "handed"
        data, fds, _, _ = socket.recv_fds(ours, 1 << 16, 4)
    answer = json.loads(data)
    engine = _adopt(answer, list(fds))
    closing = threading.Thread(target=daemon.close)
    try:
        closing.start()
        _healthy_run_passes(engine)
        assert closing.is_alive()
    finally:
        engine.close()
    closing.join(timeout=15)
    assert not closing.is_alive(), "the daemon did not end once its handed zygote had"
    assert _wait_exit(int(answer["pid"]), 0) and not Path(answer["scratch"]).exists()
