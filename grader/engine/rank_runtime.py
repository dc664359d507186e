"""What runs inside one rank process, between the fork and the report.

It isolates the rank (own output pipe, own working directory, dies with its parent), arms the
stack dumps the grader reads at a deadline or a crash, runs the check's worker function, and sends
back one report of raw facts. It never judges: verdicts are made in the grader's own process.
"""

from __future__ import annotations

import datetime
import faulthandler
import functools
import importlib
import importlib.util
import io
import os
import re
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Final, NamedTuple, NoReturn, cast
from urllib.parse import urlparse

from grader.engine import collectives, spawn_log, tamper, wire
from grader.engine.contract import RankSpec
from grader.engine.facts import REFUSED
from grader.engine.platforms import STACK_DUMP_SIGNAL
from grader.engine.wrapped_errors import short_message, traceback_text, wrapped_failures

AGENT_STORE_VARIABLE = "TORCHELASTIC_USE_AGENT_STORE"  # torch's rendezvous: every rank a store client


IMPORT_CALLS: Final = "student_import_calls"  # the facts key: function name -> line of the top-level call
# The facts key: the ranks whose Gloo group registered its address in the store rank 0 hosts.
RENDEZVOUS_RANKS: Final = "rendezvous_ranks"
GLOO_ADDRESS_KEY = re.compile(r"(?:default_pg/)?0//\w+//\d+/(\d+)")
GRADER_PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep  # frames of the grader's own wrappers and workers


class StepCounter:
    """The optimizer steps the student's code took in this rank's process, counted by torch's global step hook:
    how far a training run was when it raised (the judge words it as the phase, grader/judge/phases.py). A step
    torch takes on its own counts not: get_state_dict's, which makes an optimizer's state with a step of lr 0."""

    def __init__(self, student_file: Path | None) -> None:
        self.steps = 0
        self._student = str(student_file) if student_file else None
        self._libraries: tuple[str, ...] = ()

    def install(self) -> Any:
        """Count from now on; returns the hook's handle (a rank keeps it for its life, a test removes it)."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        torch_dir = Path(torch.__file__).parent
        stdlib = sysconfig.get_paths()["stdlib"] + os.sep
        self._libraries = (f"{torch_dir / 'optim'}{os.sep}", f"{torch_dir / 'amp'}{os.sep}", GRADER_PACKAGE, stdlib)
        return register_optimizer_step_post_hook(self._stepped)

    def _stepped(self, *_: Any) -> None:
        frame = sys._getframe(1)
        while frame.f_back is not None and frame.f_code.co_filename.startswith(self._libraries):
            frame = frame.f_back  # the optimizer's own wrappers, a GradScaler's step, the grader's: up to the caller
        if frame.f_code.co_filename == self._student:
            self.steps += 1


class StudentCodeError(Exception):
    """The student's file could not be loaded, or lacks a function the check needs."""


class RankContext:
    """A worker's view of its rank: who it is, the student's code, the grader's rendezvous."""

    def __init__(self, spec: RankSpec) -> None:
        self.rank: int = spec["rank"]
        self.world_size: int = spec["world_size"]
        self.local_rank: int = spec.get("local_rank", self.rank)  # the GPU index: rank within its node
        self.backend: str = spec["backend"]
        self.run_dir = Path(spec["run_dir"])
        self.collective_timeout = datetime.timedelta(seconds=spec["collective_timeout"])
        self.init_method: str = spec.get("init_method") or f"file://{self.run_dir / 'rendezvous'}"
        student_file = spec["student_file"]
        self.student_file = Path(student_file) if student_file else None
        self.facts: dict[str, Any] = {}
        self.functions_asked: list[str] = []  # the student's functions the worker looked up, in order
        self.step_counter = StepCounter(self.student_file)  # installed by the runtime with torch loaded
        self.collectives: collectives.Recorder | None = None  # the rank's collective watch, set by the runtime
        self._student_module: ModuleType | None = None

    # --- the student's code -------------------------------------------------------------
    def student_module(self) -> ModuleType:
        """Import the student's file (once) under its own name, so spawned children can too.

        Spies must be installed before this is first called: `from torch import save` binds
        whatever torch.save is at import time. Every function of the file that runs while it is
        imported (a test call left at its top level runs on every rank) is reported in
        facts[IMPORT_CALLS], with the top-level line that called it; the judge decides what it means.
        """
        if self._student_module is None:
            if self.student_file is None:
                raise StudentCodeError("this check was started without a student file")
            path, calls = str(self.student_file), self.facts.setdefault(IMPORT_CALLS, {})

            def record(frame: Any, event: str, _: Any) -> None:
                if event == "call" and frame.f_code.co_filename == path and frame.f_code.co_name != "<module>":
                    top = frame
                    while top.f_back is not None and not (
                        top.f_code.co_name == "<module>" and top.f_code.co_filename == path
                    ):
                        top = top.f_back
                    calls.setdefault(frame.f_code.co_name, top.f_lineno)

            tamper.freeze()  # the grader's code as it is before the student's first runs
            previous = sys.getprofile()
            sys.setprofile(record)
            try:
                self._student_module = load_module_from_file(self.student_file)
            finally:
                sys.setprofile(previous)
        return self._student_module

    def student(self, name: str) -> Callable[..., Any]:
        self.functions_asked.append(name)
        module = self.student_module()
        function = getattr(module, name, None)
        if not callable(function):
            assert self.student_file is not None  # student_module() raised otherwise
            raise StudentCodeError(f"{self.student_file.name} defines no function {name}()")
        return function

    # --- the collective watch (grader/engine/collectives.py) ---------------------------
    def watch_functional_collectives(self) -> None:
        """Have the watch log DTensor's functional collectives too (FSDP2's full state dict makes them): a call of
        them that its peers never join is then named as any other. Before the student's code runs."""
        if self.collectives is not None:
            self.collectives.watch_functional()

    def returned_from(self, function: str) -> bool:
        """The student's `function` returned on this rank: True once it returned on every rank, so that collectives
        the worker makes next meet its peers' (and never a call the student made on some ranks only, whose mismatch
        they would hide); False once some peer still makes, or failed in, the student's calls (the worker then makes
        none: that peer's failure is the run's). Only then may a worker make collectives of its own."""
        return self.collectives is None or self.collectives.returned_from(function, self.world_size)

    # --- what the grader sets up --------------------------------------------------------
    @property
    def device(self) -> Any:
        import torch

        return torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")

    def init_group(self) -> None:
        """Form the process group through a file store private to this run (never a port).

        Ranks on several nodes (torchrun) meet at torchrun's MASTER_ADDR/PORT instead (env://).
        """
        import torch
        import torch.distributed as dist

        if self.backend == "nccl":
            torch.cuda.set_device(self.local_rank)
        dist.init_process_group(
            self.backend,
            init_method=self.init_method,
            rank=self.rank,
            world_size=self.world_size,
            timeout=self.collective_timeout,
        )
        # Nobody goes on (and possibly exits) before every rank has finished connecting: a rank
        # leaving right after its own init can break a slower peer's gloo connection.
        dist.barrier()

    def spy(
        self,
        owner: Any,
        attribute: str,
        describe: Callable[..., dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """Record every call of owner.attribute (before it runs); returns the growing call list."""
        original = getattr(owner, attribute)
        calls: list[dict[str, Any]] = []

        @functools.wraps(original)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            calls.append(describe(*args, **kwargs) if describe else {})
            return original(*args, **kwargs)

        tamper.install(owner, attribute, recorded)
        return calls


def load_module_from_file(path: Path) -> ModuleType:
    """Import a file as a top-level module named after it, its folder first on the path."""
    folder = str(path.parent)
    sys.path.insert(0, folder)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH")]))
    name = path.stem
    sys.modules.pop(name, None)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise StudentCodeError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise StudentCodeError(f"importing {path.name} failed") from exc
    return module


CHAIN_MESSAGE_CHARS = 4000  # of each exception's message in a reported chain


def exception_chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or while handling, as Python prints them:
    `__cause__`, else `__context__` unless `raise ... from None` suppressed it. A wrapper that
    re-raises keeps the original error, and a check must see it there."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return chain


def chain_facts(exc: BaseException) -> list[dict[str, str]]:
    """Type and message of every exception in the chain, outermost first (plain values, for a report)."""
    return [{"type": type(e).__name__, "message": str(e)[-CHAIN_MESSAGE_CHARS:]} for e in exception_chain(exc)]


PHASE_CALLS = 4  # library frames a phase reports: a decorator's wrapper can come before the function it wraps


def library_calls(frames: traceback.StackSummary, caller: Callable[[str], bool]) -> list[str]:
    """The library frames below the first of the caller's (by file: the student's, or the grader's worker where the
    student's code is not on the stack), "torch/_tensor.py:backward", outermost first, the grader's own wrappers
    left out: the call the error came out of, the phase the rank was in."""
    calls: list[str] = []
    seen = False  # a frame of the caller's: the library frames after it are calls the caller made
    for frame in frames:
        if caller(frame.filename):
            if calls:
                break  # the library called back into the caller's code (a hook): the outer call is the phase
            seen = True
        elif seen and not _is_grader_file(frame.filename):
            calls.append(f"{frame.filename.rsplit('site-packages/', 1)[-1]}:{frame.name}")
    return calls[:PHASE_CALLS]


def _phase(frames: traceback.StackSummary, student: str | None, steps: int | None) -> dict[str, Any]:
    """The library calls the student's code was in when it raised, else those of the grader's worker ("by"), and
    the optimizer steps done by then (where the rank counted them)."""
    by = "student" if any(f.filename == student for f in frames) else "grader"
    calls = library_calls(frames, student.__eq__ if by == "student" and student else _is_grader_file)
    return {"calls": calls, "by": by, **({} if steps is None else {"steps": steps})}


def _is_grader_file(filename: str) -> bool:
    return filename.startswith(GRADER_PACKAGE)


def describe_exception(exc: BaseException, student_file: Path | None, steps: int | None = None) -> dict[str, Any]:
    """Raw facts about an exception: the student's frames, where it was raised, the traceback; its phase: the
    library calls it came out of and the optimizer steps done by then (`steps`, where the rank counted them)."""
    frames = traceback.extract_tb(exc.__traceback__)
    cause = exc.__cause__ if isinstance(exc, StudentCodeError) else None
    if cause is not None:
        frames = traceback.extract_tb(cause.__traceback__)
    student = str(student_file) if student_file else None
    student_frames = [
        {"file": f.filename, "line": f.lineno, "function": f.name, "code": f.line or ""}
        for f in frames
        if f.filename == student
    ]
    raised_by_student = bool(frames) and student is not None and frames[-1].filename == student
    inner = cause or exc
    wrapped = wrapped_failures(inner)  # a DCP or spawn error: each rank's own error, not 60 lines said twice
    message = short_message(wrapped) if wrapped else str(inner)
    chain = chain_facts(inner)
    if wrapped:
        chain[0]["message"] = message
        chain[1:1] = [{"type": f.type, "message": f.message[-CHAIN_MESSAGE_CHARS:], "who": f.who} for f in wrapped]
    return {
        "type": type(inner).__name__,
        "message": message,
        "grader_message": str(exc) if cause is not None else "",
        "student_load_error": isinstance(exc, StudentCodeError),
        "not_implemented": isinstance(inner, NotImplementedError) and raised_by_student,
        "student_frames": student_frames,
        "traceback": traceback_text(inner, wrapped) if wrapped else "".join(traceback.format_exception(inner)),
        "chain": chain,
        "phase": _phase(frames, student, steps),
    }


def _isolate(spec: RankSpec, out_fd: int, stack_fd: int) -> None:
    """Own output, own folder, the grader's environment; stacks dumped on a crash or on request.
    Temporary files land in the run's folder, removed when the run ends: torch's elastic launcher
    and multiprocessing's error files would otherwise pile up in the system's temp folder, one per
    run, on a machine that runs checks all day."""
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    # sys.stdout and sys.stderr are typed TextIO; in a fresh rank process they are the interpreter's TextIOWrappers
    cast(io.TextIOWrapper, sys.stdout).reconfigure(line_buffering=True)
    cast(io.TextIOWrapper, sys.stderr).reconfigure(line_buffering=True)
    os.chdir(spec["run_dir"])
    os.environ.update(spec["env"])
    temp = Path(spec["run_dir"]) / "tmp"
    temp.mkdir(exist_ok=True)
    os.environ.update({"TMPDIR": str(temp), "TEMP": str(temp), "TMP": str(temp)})
    tempfile.tempdir = None  # forget the folder the launcher's process looked up before the fork
    faulthandler.enable(file=stack_fd, all_threads=True)
    if STACK_DUMP_SIGNAL is not None:  # elsewhere (Windows) the launcher asks in another way (platforms.py)
        faulthandler.register(STACK_DUMP_SIGNAL, file=stack_fd, all_threads=True)


def _host_rendezvous(spec: RankSpec) -> Any:
    """Rank 0 hosts this run's TCPStore on a port the OS assigns, and tells the other ranks.

    Code that forms its group from MASTER_ADDR/MASTER_PORT (env://, tcp://, a TCPStore) then meets
    there (`_wrap_init`). A port merely found free by the grader could be taken by another grading
    before rank 0 binds it, and another run's rank could even join this run's store; a port held
    from the start cannot.
    Returns the store (rank 0), which must stay referenced for the life of the rank.
    """
    from torch.distributed import TCPStore

    port_file = Path(spec["run_dir"]) / "rendezvous.port"
    timeout = datetime.timedelta(seconds=spec["collective_timeout"])
    store = None
    if spec["rank"] == 0:
        store = TCPStore("127.0.0.1", 0, spec["world_size"], is_master=True, wait_for_workers=False, timeout=timeout)
        staged = port_file.with_suffix(".staged")
        staged.write_text(str(store.port))
        staged.rename(port_file)
    else:
        give_up = time.monotonic() + timeout.total_seconds()
        while not port_file.exists():
            if time.monotonic() > give_up:
                raise RuntimeError("rank 0 never published the rendezvous port (did it fail to start?)")
            time.sleep(0.002)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port_file.read_text()
    return store


def _meets_at_hosted_store(arguments: dict[str, Any], hosted_port: str) -> bool:
    """Whether an init_process_group call names the launcher's rendezvous: env:// (or no
    init_method) with the MASTER_PORT the grader set, or tcp:// to that same port."""
    if arguments.get("store") is not None:
        return False
    method = arguments.get("init_method")
    if method in (None, "env://"):
        return os.environ.get("MASTER_PORT") == hosted_port
    if not isinstance(method, str) or not method.startswith("tcp://"):
        return False
    try:
        return str(urlparse(method).port) == hosted_port
    except ValueError:  # a malformed port: torch will say so
        return False


def _as_agent_store_client(hosted_port: str) -> None:
    """A TCPStore the code builds on the launcher's port joins the store rank 0 hosts as a client,
    even where the code asks rank 0 to be the server, as it would be on a free port a launcher
    handed it. Any other port keeps plain torch behaviour."""
    import torch.distributed as dist

    class TCPStore(dist.TCPStore):
        __doc__ = dist.TCPStore.__doc__

        def __init__(self, host_name: str, port: int, *args: Any, **kwargs: Any) -> None:
            if str(port) == hosted_port:
                if len(args) >= 2:  # (world_size, is_master, ...)
                    args = (args[0], False, *args[2:])
                else:
                    kwargs["is_master"] = False
            super().__init__(host_name, port, *args, **kwargs)

    tamper.install(dist, "TCPStore", TCPStore)


def _wrap_init(default_timeout: datetime.timedelta, hosted_port: str | None, debug_collectives: bool) -> None:
    """The grader's conditions for every `init_process_group` the code under test makes.

    - A timeout within the check's deadline, not gloo's 30 minutes, unless the code sets one.
    - The launcher's rendezvous (env://, or tcp:// to MASTER_ADDR:MASTER_PORT, or a TCPStore on
      that port) meets at the store rank 0 hosts, every rank a client, as under torchrun's agent
      store (TORCHELASTIC_USE_AGENT_STORE). Code that picks its own port or init_method gets plain
      torch behaviour, so that its mistake runs, and is named, as it would anywhere.
    """
    import inspect

    import torch.distributed as dist

    original = dist.init_process_group
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        if bound.arguments.get("timeout") is None:
            bound.arguments["timeout"] = default_timeout
        if hosted_port is None or not _meets_at_hosted_store(bound.arguments, hosted_port):
            return original(*bound.args, **bound.kwargs)
        before = os.environ.get(AGENT_STORE_VARIABLE)
        os.environ[AGENT_STORE_VARIABLE] = "True"
        try:
            return original(*bound.args, **bound.kwargs)
        finally:
            if before is None:
                os.environ.pop(AGENT_STORE_VARIABLE, None)
            else:
                os.environ[AGENT_STORE_VARIABLE] = before

    tamper.install(dist, "init_process_group", init_process_group)
    if hosted_port is not None:
        _as_agent_store_client(hosted_port)
    if debug_collectives:
        dist.set_debug_level(dist.DebugLevel.DETAIL)


def run_rank(
    spec: RankSpec, out_fd: int, report_fd: int, stack_fd: int, before_exit: Callable[[], None] = lambda: None
) -> None:
    """Run the spec's worker on this rank and send back its report. Never returns.
    `before_exit` lets a launcher flush what it relays (platforms.rank_fds)."""
    os.set_inheritable(report_fd, False)
    _isolate(spec, out_fd, stack_fd)  # stack_fd stays open: faulthandler writes to it on a signal
    spawn_log.install(Path(spec["run_dir"]), spec.get("student_file"))
    import torch

    torch.set_num_threads(1)
    context = RankContext(spec)
    recorder = collectives.Recorder(Path(spec["run_dir"]), spec["rank"], spec.get("student_file"))
    report = _bind_report(report_fd, context, recorder, before_exit, torch)  # writes the channel's opening
    recorder.on_mismatch = report.mismatched  # called by the watch's thread: the main one waits in a call
    recorder.install()
    context.collectives = recorder
    try:
        context.step_counter.install()
        if spec.get("host_store"):
            report.keep_store(_host_rendezvous(spec))
        hosted_port = os.environ["MASTER_PORT"] if spec.get("host_store") else None
        _wrap_init(datetime.timedelta(seconds=spec["collective_timeout"]), hosted_port, spec["debug_collectives"])
        module_name, _, function_name = spec["target"].partition(":")
        worker = getattr(importlib.import_module(module_name), function_name)
    except BaseException as exc:
        report.raised(exc)
    report.run(worker, spec["kwargs"])


class _Report(NamedTuple):
    """A rank's way to its one report, as closures bound before any student code loads (`_bind_report`)."""

    run: Callable[[Callable[..., Any], dict[str, Any]], NoReturn]  # the worker, then the report of how it ended
    raised: Callable[[BaseException], NoReturn]
    mismatched: Callable[[dict[str, Any]], NoReturn]  # the collective watch found a mismatch
    keep_store: Callable[[Any], None]  # rank 0's rendezvous store: alive with the rank, read at the report


def _bind_report(
    report_fd: int, context: RankContext, recorder: collectives.Recorder, before_exit: Callable[[], None], torch: Any
) -> _Report:
    """Everything between the worker's end and the grader: each function, object and builtin it uses is bound here,
    before the student's file is imported, and its code reads no global, so rebinding a name later (of this module,
    wire, collectives, tamper, os, sys, json, numpy, torch or builtins) changes nothing in what is sent. Writes the
    report channel's opening (the key the report is sealed with: wire.sealed_encoder) before it returns.

    What the code under test can still do, it does to the runtime's objects themselves (the facts dict in place, these
    closures, the memory): nothing inside the rank's own process rules that out (docs/SECURITY.md, "Forged facts")."""
    from builtins import (  # noqa: UP029 - bound now: a builtin rebound later is not read
        BaseException,
        Exception,
        OSError,
        RecursionError,
        RuntimeError,
        SystemExit,
        ValueError,
        getattr,
        int,
        isinstance,
        memoryview,
        sorted,
        str,
    )

    opening, encode = wire.sealed_encoder(torch)
    write, close, end, clock, acquire = os.write, os.close, os._exit, time.perf_counter, threading.Lock().acquire
    flushes = (sys.stdout.flush, sys.stderr.flush)
    facts, update, asked = context.facts, context.facts.update, context.functions_asked
    student_file, counter = context.student_file, context.step_counter
    leave, after_error, describe, waiting = recorder.leave, recorder.after_error, describe_exception, _mismatch_error
    from grader.engine import exact  # torch's own methods, bound now: torch is loaded, the student's file is not

    tampered, refused, address = tamper.replaced, exact.refused, GLOO_ADDRESS_KEY.fullmatch
    mismatch_key, rendezvous_key, tampered_key = collectives.MISMATCH, RENDEZVOUS_RANKS, tamper.TAMPERED
    refused_key = REFUSED
    unencodable = (wire.WireError, RecursionError, RuntimeError)  # RuntimeError: a fact changed while encoded
    stores: list[tuple[Any, Callable[[], list[str]] | None]] = []
    started = clock()

    def write_all(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[write(report_fd, view) :]

    def registered_ranks() -> list[int] | None:
        """The ranks whose default group published its Gloo address in the grader's own store, one key per rank
        (0//cpu//0/<rank>, under default_pg/ where torch made the store from the address): seen by the store, not
        reported by the code under test. None where the store cannot list its keys."""
        try:
            keys = stores[0][1]()  # type: ignore[misc]
        except Exception:  # a store without the extended API
            return None
        return sorted({int(found[1]) for key in keys if (found := address(key))})

    def send(error: dict[str, Any] | None) -> NoReturn:
        """Send the rank's one report and exit; a second caller (another thread) waits here until the exit."""
        acquire()
        if stores:
            facts[rendezvous_key] = registered_ranks()
        found = tampered()
        if found:
            facts[tampered_key] = found
        objects = refused()
        if objects:
            facts[refused_key] = objects
        try:
            payload = encode({"facts": facts, "error": error, "seconds": clock() - started})
        except unencodable as exc:
            kept = {key: facts[key] for key in (mismatch_key, tampered_key, refused_key) if key in facts}
            payload = encode({"facts": kept, "error": {"type": "WireError", "message": str(exc)}, "seconds": 0.0})
        write_all(payload)
        close(report_fd)
        for flush in flushes:
            try:
                flush()
            except (OSError, ValueError):  # the code under test closed it
                pass
        before_exit()
        end(0)

    def left(how: str, function: str) -> None:
        try:
            leave(how, function)
        except Exception:  # the collective log's line is lost (its helpers rebound): the report is not
            pass

    def raised(exc: BaseException) -> NoReturn:
        left("raised", "")
        try:
            error = describe(exc, student_file, counter.steps)
            if isinstance(exc, SystemExit):
                error["message"] = f"the code called sys.exit({exc.code!r})"
            mismatch = after_error(exc)
        except BaseException:  # helpers the code under test broke: an error is reported all the same
            error = {"type": "Error", "message": "the rank raised an error the grader could not describe"}
            mismatch = None
        if mismatch is not None:
            facts[mismatch_key] = mismatch
        send(error)

    def run(worker: Callable[..., Any], kwargs: dict[str, Any]) -> NoReturn:
        try:
            returned = worker(context, **kwargs)
        except BaseException as exc:  # SystemExit from student code included: it is a fact to report
            raised(exc)
        left("returned", (asked or [""])[-1])
        if returned:
            update(returned)
        send(None)

    def mismatched(fact: dict[str, Any]) -> NoReturn:
        facts[mismatch_key] = fact
        try:
            error = waiting(student_file)
        except Exception:
            error = {"type": "CollectiveMismatch", "message": "the ranks called different collectives"}
        send(error)

    def keep_store(store: Any) -> None:
        stores.append((store, getattr(store, "list_keys", None)))

    write_all(opening)
    return _Report(run, raised, mismatched, keep_store)


def _mismatch_error(student_file: Path | None) -> dict[str, Any]:
    """The error a rank reports when its watch found a collective mismatch (the fact, which the judge
    words, is in its facts): the main thread's stack says where this rank waits."""
    main = sys._current_frames().get(threading.main_thread().ident or 0)
    stack = traceback.extract_stack(main) if main is not None else traceback.StackSummary()
    student = str(student_file) if student_file else None
    return {
        "type": "CollectiveMismatch",
        "message": "the ranks called different collectives (this rank's watch found it)",
        "grader_message": "",
        "student_load_error": False,
        "not_implemented": False,
        "student_frames": [
            {"file": f.filename, "line": f.lineno, "function": f.name, "code": f.line or ""}
            for f in stack
            if f.filename == student
        ],
        "traceback": "Stack of the waiting rank (most recent call last):\n" + "".join(stack.format()),
        "chain": [],
    }
