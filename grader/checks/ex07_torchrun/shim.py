"""Runs inside every process torchrun starts, around the student's script.

`run(SCRIPT, *ARGS)` is torchrun's entrypoint (see workers.py). It records raw facts (the
environment torchrun set, the arguments of init_process_group, what the script printed or logged
on either stream, the weights before the first optimizer step and the gradients and weights of
every step, whether the group was destroyed, and the device `pick_device()` picks on a node with
simulated GPUs), runs SCRIPT as `python SCRIPT ARGS...` would (`__name__ == "__main__"`,
sys.argv, its folder first on sys.path; sys.exit(0) is a normal end), and writes the facts as JSON
to $GRADER_EX07_FACTS/rank<RANK>.json after every event, so they survive a hang or a crash; `ended`,
written last, says that every fact was recorded (a process torchrun stopped has no such mark). On
STACK_DUMP_SIGNAL it writes its Python stacks beside them. Nothing is judged here.
"""

from __future__ import annotations

import ctypes
import datetime
import faulthandler
import functools
import inspect
import json
import logging
import os
import signal
import sys
import warnings
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from grader.engine.platforms import STACK_DUMP_SIGNAL

FACTS_ENV = "GRADER_EX07_FACTS"
TIMEOUT_ENV = "GRADER_EX07_GROUP_TIMEOUT"
TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
MAX_PRINTED = 4000  # characters of output kept
STACK_FILE = "stack-rank{rank}.txt"
_LOGGING_FILE = logging.__file__
_WARNINGS_FILE = warnings.__file__


class Facts:
    """A fact dict persisted to disk on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "printed": "",
            "init_calls": [],
            "start": None,
            "steps": [],
            "device": None,
            "error": None,
            "destroy_calls": 0,
            "initialized_at_end": None,
            "script_finished": False,
            "ended": False,
        }

    def update(self, **values: Any) -> None:
        self.data.update(values)
        self.save()

    def save(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.data))
        temporary.replace(self.path)


class EmittedStream:
    """stdout or stderr, keeping a copy of what the script itself emits: its prints, and the
    records its own loggers write (a warning torch shows, or a record of torch's logger, is not
    the script's output)."""

    def __init__(self, stream: TextIO, facts: Facts, script: str) -> None:
        self._stream, self._facts, self._script = stream, facts, script

    def _from_script(self) -> bool:
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            if code.co_filename == _WARNINGS_FILE:
                return False
            if code.co_filename == _LOGGING_FILE and code.co_name == "handle":
                record = frame.f_locals.get("record")
                return getattr(record, "pathname", None) == self._script
            if code.co_filename == self._script:
                return True
            frame = frame.f_back
        return False

    def write(self, text: str) -> int:
        printed = self._facts.data["printed"]
        if text and len(printed) < MAX_PRINTED and self._from_script():
            self._facts.update(printed=printed + text[: MAX_PRINTED - len(printed)])
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def die_with_parent() -> None:
    """If the parent process is killed, this one goes too."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _plain(value: Any) -> Any:
    """JSON-safe: integers of any kind (numpy's too) as int, strings as is, the rest as repr."""
    if value is None or isinstance(value, (str, int)):
        return value
    if hasattr(value, "__index__"):
        return value.__index__()
    return repr(value)


def _spy_init(facts: Facts) -> None:
    import torch.distributed as dist

    original = dist.init_process_group
    timeout = datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, "20")))

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(original).bind_partial(*args, **kwargs).arguments
        call = {key: _plain(bound.get(key)) for key in ("backend", "init_method", "rank", "world_size")}
        facts.data["init_calls"].append(call)
        facts.save()
        kwargs.setdefault("timeout", timeout)
        result = original(*args, **kwargs)
        call["group"] = {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
        facts.save()
        return result

    dist.init_process_group = init_process_group


def _count_destroy(facts: Facts) -> None:
    import torch.distributed as dist

    destroy = dist.destroy_process_group

    @functools.wraps(destroy)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        facts.update(destroy_calls=facts.data["destroy_calls"] + 1)
        return destroy(*args, **kwargs)

    dist.destroy_process_group = destroy_process_group


def _clear_of_teardown_deadlock() -> None:
    """Keep a torch 2.13 deadlock at the end of a DDP script from failing correct code.

    Every backward stashes a Python object (a contextvars.Context, for compiled autograd's device
    threads) in torch's thread-local state; the gloo work items DDP issues during backward capture
    that state, and the gloo thread that destroys the last of them needs the GIL to drop it. When
    the process group is freed meanwhile (DDP's reducer freed after destroy_process_group), the
    main thread waits for that gloo thread while holding the GIL, for ever. It happens whenever the
    gloo thread runs late, as on a loaded machine (measured: half of the launches of two sandboxed
    gradings side by side). Eager training on the CPU never reads the stash: here it stays empty.
    """
    import torch

    if hasattr(torch._C, "_stash_obj_in_tls"):
        torch._C._stash_obj_in_tls = lambda key, arg: None


def _flat(params: list[Any]) -> list[list[float]]:
    return [p.detach().cpu().reshape(-1).tolist() for p in params]


def _record_steps(facts: Facts) -> None:
    """The weights the first step starts from, and each step's gradients and resulting weights."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    def parameters(optimizer: Any) -> list[Any]:
        return [p for group in optimizer.param_groups for p in group["params"]]

    def before_step(optimizer: Any, *_: Any) -> None:
        params = parameters(optimizer)
        if facts.data["start"] is None:
            facts.data["start"] = {"values": _flat(params), "shapes": [list(p.shape) for p in params]}
        grads = [p.grad if p.grad is not None else p.new_zeros(p.shape) for p in params]
        facts.data["steps"].append({"grads": _flat(grads)})

    def after_step(optimizer: Any, *_: Any) -> None:
        if facts.data["steps"]:
            facts.data["steps"][-1]["params"] = _flat(parameters(optimizer))
        facts.save()

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)


def _device_on_simulated_gpu_node(script: dict[str, Any], facts: Facts) -> str | None:
    """What pick_device() returns on a node with LOCAL_WORLD_SIZE (simulated) GPUs, the GPU bound when it
    returns, and what it asked (current_device(), before or after a binding); "cuda" alone means the
    bound GPU, as it would for a tensor."""
    import torch

    from grader.rank.simulated_gpu import SimulatedGpuNode

    pick_device = script.get("pick_device")
    if not callable(pick_device):
        return None
    bindings: list[int | None] = []

    def record(event: dict[str, Any]) -> None:
        bindings.append(event["device"])
        facts.update(set_device=bindings)

    queries: list[dict[str, Any]] = []

    def ask(event: dict[str, Any]) -> None:
        queries.append(event)
        facts.update(queried=queries)

    node = SimulatedGpuNode(int(os.environ["LOCAL_WORLD_SIZE"]), record, ask)
    node.install()
    chosen = pick_device()
    facts.update(bound=node.current)
    try:
        device = torch.device(chosen)
    except (RuntimeError, TypeError, ValueError, OverflowError):  # what it returned is the fact: no device
        return repr(chosen)[:80]
    if device.type == "cuda" and device.index is None:
        return f"cuda:{node.current}"
    return str(device)


def _describe(exc: BaseException, script: str) -> dict[str, Any]:
    from grader.engine.rank_runtime import describe_exception

    if isinstance(exc, SystemExit):
        return {
            "type": "SystemExit",
            "message": f"the script called sys.exit({exc.code!r})",
            "student_frames": [],
            "not_implemented": False,
            "traceback": "",
        }
    return describe_exception(exc, Path(script))


def _arm_stack_dump(folder: Path, rank: str) -> None:
    if STACK_DUMP_SIGNAL is not None and hasattr(faulthandler, "register"):
        stacks = open(folder / STACK_FILE.format(rank=rank), "w")  # noqa: SIM115 - open for the process's life
        faulthandler.register(STACK_DUMP_SIGNAL, file=stacks, all_threads=True)


def run(script: str, *script_args: str) -> None:
    """torchrun's entrypoint in every process: the student's script as __main__, under the spies."""
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.api import SignalException

    die_with_parent()
    folder = Path(os.environ[FACTS_ENV])
    _arm_stack_dump(folder, os.environ["RANK"])
    facts = Facts(folder / f"rank{os.environ['RANK']}.json")
    facts.update(env={name: os.environ.get(name) for name in TORCHRUN_VARIABLES}, pid=os.getpid())
    sys.stdout = EmittedStream(sys.stdout, facts, script)
    sys.stderr = EmittedStream(sys.stderr, facts, script)
    _spy_init(facts)
    _count_destroy(facts)
    _clear_of_teardown_deadlock()
    _record_steps(facts)
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).parent))
    names: dict[str, Any] = {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__}
    try:
        exec(compile(Path(script).read_text(), script, "exec"), names)  # what `python SCRIPT` does
    except SystemExit as exc:
        if exc.code not in (0, None):
            facts.update(error={**_describe(exc, script), "stage": "running the script"})
            raise
    except BaseException as exc:
        facts.update(error={**_describe(exc, script), "stage": "running the script"})
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    facts.update(script_finished=True, initialized_at_end=dist.is_initialized())
    try:
        facts.update(device=_device_on_simulated_gpu_node(names, facts))
    except SignalException:  # stopped (torchrun ends a launch another process failed): pick_device did not fail
        raise
    except Exception as exc:  # a fact about pick_device, not a failure of the launch
        facts.update(error={**_describe(exc, script), "stage": "pick_device() on a node with simulated GPUs"})
    facts.update(ended=True)
