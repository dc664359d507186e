"""The collectives a rank runs, seen where every caller's call arrives: torch's dispatcher.

`dist.*`, a ProcessGroup's own methods, `torch.ops.c10d.*` called directly, the functional collectives
(`torch.distributed._functional_collectives`, DTensor's redistributions) and the callers in C++ (DDP's
reducer, ZeroRedundancyOptimizer's and FSDP's collectives) all reach one of the ops of the namespaces
below (c10d::allreduce_, c10d::send, _c10d_functional::all_reduce...). A TorchDispatchMode sees each of
them, on the thread that entered it and on the autograd threads that inherit its state; an observer
classifies each call and hands it to a callback before it runs.

What it does not see: a backend's own methods called from Python (`pg._get_backend(device).allreduce`),
which go to the backend without the dispatcher (BACKEND_COLLECTIVES: a caller spies on those in Python),
and calls made while the mode is off: code that pops the mode stack, and a thread the mode is not on (a
mode is per thread: `ObservedThreads` puts one on every `threading.Thread` started while it is entered).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from grader.engine import exact
from grader.rank.patches import Patches

NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd")
# ops of those namespaces that communicate nothing: a functional collective's wait and its autograd wrapper
NOT_COMMUNICATION = ("wait_tensor", "_wrap_tensor_autograd", "check_for_nan")
# each kind, and how the ops' names spell it (the first that matches wins); any other op (reduce_, gather_,
# scatter_) is its own kind, its bare name
_KINDS = (
    ("all_reduce", ("allreduce", "all_reduce")),
    ("all_gather", ("allgather", "all_gather")),
    ("reduce_scatter", ("reduce_scatter",)),
    ("all_to_all", ("alltoall", "all_to_all")),
    ("broadcast", ("broadcast",)),
    ("barrier", ("barrier",)),
    ("send", ("send",)),
    ("recv", ("recv",)),
)
POINT_TO_POINT = frozenset({"send", "recv"})
# the collective methods of c10d's Backend (ProcessGroupGloo...), which reach no op of the dispatcher
BACKEND_COLLECTIVES = (
    "allreduce",
    "allreduce_coalesced",
    "allgather",
    "allgather_coalesced",
    "_allgather_base",
    "reduce_scatter",
    "_reduce_scatter_base",
    "alltoall",
    "alltoall_base",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "barrier",
    "monitored_barrier",
)
# the argument that holds what this rank puts in, by the ops' own names (the first present wins)
_CONTRIBUTED = ("input_tensors", "input_tensor", "inputs", "input_list", "input", "tensors", "tensor")
_ROOT = ("root_rank", "src", "dst")  # a rooted collective's root, a message's peer


@dataclass(frozen=True)
class Collective:
    """One collective or point-to-point op, as the dispatcher received it."""

    op: str  # as torch names it: c10d.allreduce_.default
    name: str  # the op's name without overload and trailing underscore: allreduce, _allgather_base, all_reduce
    kind: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, barrier, send, recv...
    group: str | None  # the process group's name
    contributed: tuple[torch.Tensor, ...]  # what this rank puts in (sends, for a send): the tensors themselves
    numel: int  # elements of the contributed tensors
    dtype: str | None  # of the first contributed tensor: float32
    root: int | None  # the root of a broadcast/reduce/gather/scatter, the peer of a send/recv (the group's rank)
    largest_bytes: int  # the largest of its tensor arguments (a tensor, or a list of them), in bytes

    @property
    def point_to_point(self) -> bool:
        return self.kind in POINT_TO_POINT


def kind_of(name: str) -> str:
    """all_reduce, all_gather, send... from an op's name (allreduce_, _allgather_base_, all_gather_into_tensor)."""
    bare = name.strip("_")
    for kind, spellings in _KINDS:
        if any(s in bare for s in spellings):
            return kind
    return bare


_NO_OVERRIDES = torch._C.DisableTorchFunctionSubclass


def _measured(tensor: torch.Tensor) -> tuple[int, int, torch.dtype]:
    """(elements, bytes, dtype) read by torch's own methods (exact.py's copies, bound before student code) with every
    subclass's __torch_function__ off: a tensor subclass the student's code hands a collective cannot report another
    size than it holds."""
    with _NO_OVERRIDES():
        count = exact.numel(tensor)
        return count, count * exact.itemsize(tensor), exact.dtype(tensor)


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in an argument: a tensor, or lists (of lists) of them."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _group_name(value: Any) -> str | None:
    """A process group's name, from the boxed group c10d's ops take or the name the functional ones do."""
    if isinstance(value, str):
        return value
    try:
        from torch._C._distributed_c10d import ProcessGroup

        group = value if isinstance(value, ProcessGroup) else ProcessGroup.unbox(value)
        return str(group.group_name)
    except Exception:  # not a process group: the call is still classified, without its group
        return None


def classify(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Collective]:
    """The collectives one op call makes: none for an op of another namespace or a wait, one per message
    of a batch of point-to-point ops, else one."""
    name = func.__name__.split(".")[0]
    if func.namespace not in NAMESPACES or name in NOT_COMMUNICATION:
        return []
    names = [a.name for a in func._schema.arguments]
    bound = {**dict(zip(names, args)), **kwargs}
    group = _group_name(bound.get("process_group", bound.get("group_name")))
    tensors = [_tensors(v) for v in (*args, *kwargs.values())]
    largest = max((sum(_measured(t)[1] for t in ts) for ts in tensors), default=0)
    common = {"op": str(func), "name": name.rstrip("_"), "group": group, "largest_bytes": largest}
    if name == "batch_p2p_ops":  # (op_list, peer_list, tag_list, tensors): one message per entry
        return [
            _one(common, kind_of(str(op)), [tensor], peer)
            for op, peer, tensor in zip(bound.get("op_list", ()), bound.get("peer_list", ()), bound.get("tensors", ()))
        ]
    given = next((bound[n] for n in _CONTRIBUTED if n in bound), None)
    root = next((bound[n] for n in _ROOT if isinstance(bound.get(n), int)), None)
    return [_one(common, kind_of(name), _tensors(given), root)]


def _one(common: dict[str, Any], kind: str, contributed: list[torch.Tensor], root: int | None) -> Collective:
    return Collective(
        kind=kind,
        contributed=tuple(contributed),
        numel=sum(_measured(t)[0] for t in contributed),
        dtype=str(_measured(contributed[0])[2]).removeprefix("torch.") if contributed else None,
        root=root,
        **common,
    )


class CollectiveObserver(TorchDispatchMode):
    """Hands every collective op dispatched while active to `seen`, before the op runs."""

    def __init__(self, seen: Callable[[Collective], None]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func.namespace in NAMESPACES:
            for collective in classify(func, args, kwargs):
                self.seen(collective)
        return func(*args, **kwargs)


class ObservedThreads:
    """A CollectiveObserver on the thread that enters this and on every `threading.Thread` started while it is
    entered (each thread its own mode, the callback shared), so a collective run on another thread is seen too."""

    def __init__(self, seen: Callable[[Collective], None]) -> None:
        self.seen = seen
        self._mode = CollectiveObserver(seen)
        self._patches = Patches()

    def __enter__(self) -> ObservedThreads:
        original = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]  # runs every thread's run()
        seen = self.seen

        def bootstrap_inner(thread: threading.Thread) -> None:
            with CollectiveObserver(seen):
                original(thread)

        self._patches.replace(threading.Thread, "_bootstrap_inner", bootstrap_inner)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)
        self._patches.restore()
