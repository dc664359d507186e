"""Runs inside every process torchrun starts, around the student's script.

`run(SCRIPT, *ARGS)` is torchrun's entrypoint (see workers.py). It records raw facts (the
environment torchrun set, the arguments of init_process_group, what was printed, the weights after
every optimizer step, and the device `pick_device()` picks on a node with faked GPUs), runs SCRIPT
as `python SCRIPT ARGS...` would (`__name__ == "__main__"`, sys.argv, its folder first on
sys.path; sys.exit(0) is a normal end), and writes the facts as JSON to
$GRADER_EX07_FACTS/rank<RANK>.json after every event, so they survive a hang or a crash. Nothing
is judged here.
"""

from __future__ import annotations

import ctypes
import datetime
import functools
import inspect
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

FACTS_ENV = "GRADER_EX07_FACTS"
TIMEOUT_ENV = "GRADER_EX07_GROUP_TIMEOUT"
TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
MAX_PRINTED = 4000  # characters of output kept


class Facts:
    """A fact dict persisted to disk on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {"printed": "", "init_calls": [], "steps": [], "device": None, "error": None}

    def update(self, **values: Any) -> None:
        self.data.update(values)
        self.save()

    def save(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.data))
        temporary.replace(self.path)


class CountingStream:
    """A stdout that keeps a copy of what the script prints."""

    def __init__(self, stream: TextIO, facts: Facts) -> None:
        self._stream, self._facts = stream, facts

    def write(self, text: str) -> int:
        printed = self._facts.data["printed"]
        if len(printed) < MAX_PRINTED:
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


def _record_steps(facts: Facts) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def after_step(optimizer: Any, *_: Any) -> None:
        params = [p.detach().cpu().reshape(-1).tolist() for g in optimizer.param_groups for p in g["params"]]
        facts.data["steps"].append(params)
        facts.save()

    register_optimizer_step_post_hook(after_step)


def _device_on_fake_gpu_node(script: dict[str, Any], facts: Facts) -> str | None:
    """What pick_device() returns on a node with LOCAL_WORLD_SIZE (faked) GPUs."""
    import torch

    pick_device = script.get("pick_device")
    if not callable(pick_device):
        return None
    gpus = int(os.environ["LOCAL_WORLD_SIZE"])

    def set_device(device: Any) -> None:
        index = device if isinstance(device, int) else torch.device(device).index
        facts.update(set_device=[*facts.data.get("set_device", []), index])
        if index is None or not 0 <= index < gpus:
            raise RuntimeError(f"CUDA error: invalid device ordinal (cuda:{index} on a node with {gpus} GPUs)")

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: gpus
    torch.cuda.set_device = set_device
    return str(pick_device())


def _describe(exc: BaseException, script: str) -> dict[str, Any]:
    from grader.engine.rank_runtime import describe_exception

    if isinstance(exc, SystemExit):
        return {"type": "SystemExit", "message": f"the script called sys.exit({exc.code!r})", "student_frames": [],
                "not_implemented": False, "traceback": ""}
    return describe_exception(exc, Path(script))


def run(script: str, *script_args: str) -> None:
    """torchrun's entrypoint in every process: the student's script as __main__, under the spies."""
    die_with_parent()
    facts = Facts(Path(os.environ[FACTS_ENV]) / f"rank{os.environ['RANK']}.json")
    facts.update(env={name: os.environ.get(name) for name in TORCHRUN_VARIABLES}, pid=os.getpid())
    sys.stdout = CountingStream(sys.stdout, facts)
    _spy_init(facts)
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
    try:
        facts.update(device=_device_on_fake_gpu_node(names, facts))
    except Exception as exc:  # a fact about pick_device, not a failure of the launch
        facts.update(error={**_describe(exc, script), "stage": "pick_device() on a node with faked GPUs"})
