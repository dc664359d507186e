"""The portable launcher and the platform layer: how the launcher is chosen, the loopback links,
the parts written for other systems that can run here (the macOS stray finder, the Windows relays,
stack dumps on a command), and what a warm pool does that a zygote does not."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from conftest import REPO
from test_faults import FAULTS, HERE

from grader.cli import build_parser
from grader.engine import Engine, Job, loopback, platforms, pool, wire
from grader.engine.launchers import RunStreams
from grader.grading_engines import EngineContext, open_check
from grader.plan import GradingPlan


@pytest.fixture(scope="module")
def portable() -> Iterator[Engine]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        with Engine(preload=["fault_workers"], launcher="portable") as engine:
            yield engine


# --- choosing a launcher ---------------------------------------------------------------------


def test_the_launcher_is_the_option_then_the_variable_then_the_platforms(monkeypatch):
    monkeypatch.delenv(platforms.LAUNCHER_VARIABLE, raising=False)
    assert platforms.chosen_launcher()[0] == ("fork" if sys.platform.startswith("linux") else "portable")
    monkeypatch.setenv(platforms.LAUNCHER_VARIABLE, "portable")
    assert platforms.chosen_launcher() == ("portable", "GRADER_LAUNCHER=portable")
    assert platforms.chosen_launcher("fork") == ("fork", "--launcher fork")
    assert Engine().launcher == "portable" and Engine(launcher="fork").launcher == "fork"
    monkeypatch.setenv(platforms.LAUNCHER_VARIABLE, "spawn")
    with pytest.raises(platforms.LauncherError, match="GRADER_LAUNCHER=spawn: the launchers are fork, portable"):
        platforms.chosen_launcher()


def test_a_sandbox_always_forks():
    class Sandbox:
        scratch_root = "/tmp/grader"

    assert Engine(confinement=Sandbox()).launcher == "fork"  # type: ignore[arg-type]
    with pytest.raises(platforms.LauncherError, match="sandboxed grading starts ranks with the fork launcher"):
        Engine(confinement=Sandbox(), launcher="portable")  # type: ignore[arg-type]


def test_grader_check_takes_the_launcher_asked_for(catalog, monkeypatch):
    monkeypatch.delenv(platforms.LAUNCHER_VARIABLE, raising=False)
    default = platforms.chosen_launcher()[0]
    for asked, expected in (("portable", "portable"), ("fork", "fork"), ("grader", default)):
        plan = GradingPlan.from_args(build_parser().parse_args(["check", "--launcher", asked]), hidden=False)
        preload = tuple(e.workers_module for e in catalog.exercises)
        with open_check(plan, EngineContext(preload)) as grading:
            assert isinstance(grading.engine, Engine), grading.engine  # none given: a local one is opened
            assert grading.engine.launcher == expected


def test_grade_refuses_the_portable_launcher_in_a_sandbox(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "grade",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            "--launcher",
            "portable",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--launcher portable grades without a sandbox only (--no-sandbox" in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything is written: no results folder, no manifest


# --- loopback links ------------------------------------------------------------------------------


def test_framed_messages_arrive_whole_and_in_order():
    left, right = socket.socketpair()
    with left, right:
        sender, receiver = loopback.Framed(left), loopback.Framed(right)
        left.sendall(wire.encode({"a": 1}) + wire.encode({"b": [2, 3]}))
        assert receiver.receive(timeout=5) == {"a": 1} and receiver.pending()
        assert receiver.receive(timeout=0) == {"b": [2, 3]} and not receiver.pending()
        sender.send({"event": "ready"})
        assert loopback.Framed(right).receive(timeout=5) == {"event": "ready"}
        left.close()
        with pytest.raises(EOFError):
            receiver.receive(timeout=5)


def test_a_run_admits_its_own_ranks_streams_once_and_nothing_else():
    with loopback.listen() as listener:
        port = listener.getsockname()[1]
        streams = RunStreams(2, listener=listener, token=loopback.new_token())
        good = loopback.connect(port, streams.token, loopback.OUTPUT, 1)
        intruders = [
            loopback.connect(port, loopback.new_token(), loopback.OUTPUT, 0),  # another run's
            loopback.connect(port, streams.token, loopback.OUTPUT, 1),  # the same stream twice
            loopback.connect(port, streams.token, loopback.REPORT, 2),  # no rank 2 in a 2-rank run
            loopback.connect(port, streams.token, loopback.CONTROL, 0),  # not a rank's role
            socket.create_connection(("127.0.0.1", port)),
        ]
        intruders[-1].sendall(b"x" * loopback.HELLO_BYTES)
        time.sleep(0.2)
        admitted = streams.admit()
        assert list(admitted.values()) == [("output", 1)]
        good.sendall(b"hello")
        (source,) = admitted
        assert streams.read(source) == b"hello"
        for intruder in intruders:
            intruder.settimeout(5)
            assert intruder.recv(1) == b""  # closed by the grader
            intruder.close()
        good.close()
        streams.close()


# --- what is written for other systems, run here ---------------------------------------------------


def test_windows_job_structures_have_the_documented_x64_sizes():
    assert ctypes.sizeof(platforms._BasicLimits) == 64  # JOBOBJECT_BASIC_LIMIT_INFORMATION
    assert ctypes.sizeof(platforms._ExtendedLimits) == 144  # JOBOBJECT_EXTENDED_LIMIT_INFORMATION


RELAY = """
import os, socket, sys
from grader.engine import platforms
pairs = [socket.socketpair() for _ in range(3)]
(out, report, stack), drain = platforms.relayed_fds([ours for ours, _ in pairs])
os.dup2(out, 1); os.dup2(out, 2); os.close(out)
os.write(1, b"from fd 1, ")
os.system("echo from a child process")
os.write(report, b"the report"); os.close(report)
drain()
with open(sys.argv[1], "w") as result:
    for _, theirs in pairs[:2]:
        theirs.settimeout(5)
        data = b""
        while chunk := theirs.recv(1 << 16):
            data += chunk
        result.write(data.decode() + "|")
"""


def test_the_windows_relays_carry_output_and_report_before_the_rank_exits(tmp_path):
    result = tmp_path / "relayed"
    done = subprocess.run([sys.executable, "-c", RELAY, str(result)], cwd=REPO, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert result.read_text() == "from fd 1, from a child process\n|the report|"


STACKS = """
import os, sys, threading, time
from grader.engine import platforms
commands_r, commands_w = os.pipe()
stack = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)
threading.Thread(target=platforms.dump_stacks_on_request, args=(os.fdopen(commands_r, "rb"), stack),
                 daemon=True).start()
def waiting_in_student_code():
    os.write(commands_w, platforms.STACK_COMMAND)  # asked from here, so the dump finds this frame whatever the pace
    time.sleep(1.0)
    os.close(commands_w)  # the launcher goes away: this process must end itself
    time.sleep(60)
waiting_in_student_code()
"""


def test_a_stack_command_dumps_every_thread_and_a_closed_pipe_ends_the_rank(tmp_path):
    dump = tmp_path / "stack"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", STACKS, str(dump)], cwd=REPO, capture_output=True, timeout=60, start_new_session=True
    )  # it kills its own process group
    assert time.monotonic() - started < 30 and done.returncode == -signal.SIGKILL, done.stderr
    assert "in waiting_in_student_code" in dump.read_text() and "dump_stacks_on_request" in dump.read_text()


ESCAPES = """
import os, subprocess, sys, time
inside = subprocess.Popen(["sleep", "137"])
outside = subprocess.Popen(["sleep", "138"], start_new_session=True)
print(json.dumps([inside.pid, outside.pid]), flush=True)
time.sleep(60)
""".replace("import os", "import json, os")


def test_the_macos_stray_finder_kills_the_group_and_what_python_started():
    member = subprocess.Popen(
        [sys.executable, "-c", ESCAPES], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    bystander = subprocess.Popen(["sleep", "139"])
    assert member.stdout is not None
    try:
        inside, outside = json.loads(member.stdout.readline())
        member.kill()
        member.wait()
        strays = platforms.posix_strays({member.pid}, {outside}, grace=0.2)
        assert sorted((s.pid, s.command) for s in strays) == [(inside, "sleep 137"), (outside, "sleep 138")]
        assert bystander.poll() is None
        for pid in (inside, outside):
            with pytest.raises(ProcessLookupError):
                for _ in range(100):
                    os.kill(pid, 0)
                    time.sleep(0.02)
    finally:
        bystander.kill()
        bystander.wait()


# --- the warm pool ----------------------------------------------------------------------------------


def test_forged_and_garbage_connections_do_not_reach_a_run(portable):
    port = portable._link._listener.getsockname()[1]
    result = portable.run(Job("fault_workers:intrudes", 2, {"port": port}, student_file=FAULTS, deadline=30))
    assert result.ok, [r.error or r.report_problem for r in result.ranks]
    for rank in result.ranks:
        assert rank.output == f"rank {rank.rank} says hello\n" and "forged" not in rank.output


def test_a_run_larger_than_the_pool_waits_for_more_members_not_against_its_deadline(portable):
    world_size = pool.POOL_SIZE + 1
    result = portable.run(Job("fault_workers:healthy", world_size, student_file=FAULTS, deadline=10))
    assert result.ok, [r.error or r.report_problem for r in result.ranks]
    assert [float(r.facts["sum"][0]) for r in result.ranks] == [world_size * (world_size + 1) / 2] * world_size
    assert len({r.pid for r in result.ranks}) == world_size
    assert result.queued > 0.3  # the pool had to warm one more interpreter, and says so


AS_ON_WINDOWS = """
import os, signal, sys, tempfile
from pathlib import Path
import ctypes, multiprocessing.util, numpy, selectors, socket, subprocess  # the real ones, before the disguise
sys.platform = "win32"
for owner, names in ((os, ("fork", "register_at_fork", "posix_spawn", "posix_spawnp", "killpg", "setsid")),
                     (signal, ("SIGUSR1", "SIGKILL", "SIGCHLD"))):
    for name in names:
        delattr(owner, name)
sys.modules["resource"] = None  # no such module on Windows
from grader.engine import launchers, platforms, pool, pool_member, rank_runtime, spawn_log, supervisor
from grader import cli, doctor
assert platforms.chosen_launcher()[0] == "portable" and platforms.STACK_DUMP_SIGNAL is None
assert supervisor.Engine().launcher == "portable"
spawn_log.install(Path(tempfile.mkdtemp()), None)
platforms.die_with_parent(os.getppid())
print("imported")
"""


def test_the_portable_launchers_modules_load_without_posix_names():
    """Not Windows, but what a Windows Python lacks at import: no fork, no SIGUSR1, no resource."""
    done = subprocess.run([sys.executable, "-c", AS_ON_WINDOWS], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "imported\n", done.stderr
