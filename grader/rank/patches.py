"""Where the grader watches torch by replacing a function or method for one run: the replacements and
the process group's collectives, kept in one place so that every watcher restores what it replaced."""

from __future__ import annotations

from typing import Any

from grader.engine import tamper

# Every collective a `ProcessGroup` runs (its methods, which dist.* and the functional collectives reach),
# torch 2.13's *_single names included; a name an older torch lacks is skipped where it is spied on.
PROCESS_GROUP_COLLECTIVES = (
    "allreduce",
    "allreduce_coalesced",
    "allgather",
    "_allgather_base",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "all_gather_single",  # torch 2.13's all_gather_into_tensor
    "all_gather_single_coalesced",
    "reduce_scatter",
    "reduce_scatter_single",  # torch 2.13's reduce_scatter_tensor
    "reduce_scatter_single_coalesced",
    "all_to_all_single",
    "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced",
    "broadcast",
    "reduce",
    "alltoall",
    "alltoall_base",
    "scatter",
    "gather",
)


_INHERITED = object()  # the attribute was not the owner's own: restoring removes the replacement


class Patches:
    """Attributes replaced on torch's modules and classes for one run, restored in reverse order.

    What is restored is the owner's own attribute as stored, not what `getattr` returns: a pybind11
    method read from its class is a plain function that no longer binds `self` once set back."""

    def __init__(self) -> None:
        self._originals: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, name: str, replacement: Any) -> None:
        own = vars(owner) if hasattr(owner, "__dict__") else {}
        self._originals.append((owner, name, own.get(name, _INHERITED)))
        tamper.install(owner, name, replacement)

    def restore(self) -> None:
        while self._originals:
            owner, name, original = self._originals.pop()
            tamper.forget(owner, name)
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
