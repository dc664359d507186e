"""Facts a rank reads from objects the code under test built or handed back, read so that the object cannot choose
them, and a refusal (facts.REFUSED, a failing fact) where it could.

A subclass answers whatever it likes: a torch.Tensor subclass its `numel()`, `element_size()`, `dtype`, its values
(`__torch_function__` intercepts even torch's own C methods called on it, `detach()` and `clone()` included, and a
wrapper subclass declares any size over any storage); a dict or list subclass its `items()`, `len()` and iteration.
So a worker reads a size, dtype, value or entry only from an object whose exact type the contract allows
(`type(x) is torch.Tensor`, nn.Parameter, torch's own DTensor where the exercise uses it, torch's own
AsyncCollectiveTensor around a plain tensor (what a functional collective returns); dict, defaultdict,
OrderedDict, list, tuple), through the C-level methods of torch's TensorBase and of the builtin containers, bound when
this module loads (before any student code): rebinding `torch.Tensor.numel` or a builtin later changes nothing here.
Any other type is refused: the runtime reports it (facts.REFUSED) and the judge fails the check with "rank 0's optimizer
state holds a torch.Tensor subclass `Fake`; the contract asks for plain tensors" (grader/judge/runner.py).

Like tamper.py's, this code reads no global; code that edits its records in place reaches into the runtime's memory
(docs/SECURITY.md, "Forged facts").
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable
from typing import Any, Final, TypeGuard

import torch
from torch import nn

PLAIN_TENSORS: Final = "plain tensors"  # what the contract asks for, as the refusal says it
PLAIN_DTENSORS: Final = "plain tensors or DTensors"
DTENSOR, FLAT_PARAMETER = "torch.distributed.tensor", "torch.distributed.fsdp._flat_param"  # modules of torch's own
ASYNC = "torch.distributed._functional_collectives"  # AsyncCollectiveTensor's
MAX_REFUSED = 20  # records kept: one fails the check, a flood says nothing more


def _bind() -> tuple[
    Callable[..., TypeGuard[torch.Tensor]],
    Callable[[Any], int],
    Callable[[Any], int],
    Callable[[Any], int],
    Callable[[Any], Any],
    Callable[[Any], int],
    Callable[[Any], list[int]],
    Callable[[Any, str], Any],
    Callable[[Any, str], list[tuple[Any, Any]]],
    Callable[[Any, str], list[Any]],
    Callable[[], list[dict[str, str]]],
]:
    """tensor, numel, itemsize, nbytes, dtype, dim, shape, local, items, values and refused: closures over what they
    call (above)."""
    from builtins import dict, id, int, isinstance, len, list, set, str, tuple, type  # noqa: UP029 - bound now

    base: Any = torch._C.TensorBase
    plain_types: tuple[type, ...] = (torch.Tensor, nn.Parameter)
    mappings = (dict, collections.defaultdict, collections.OrderedDict)
    sequences = (list, tuple)
    numel_of, element_size, dtype_of, dim_of, size_of = (
        base.numel,
        base.element_size,
        base.dtype.__get__,
        base.dim,
        base.size,
    )
    dict_items, list_of, append, modules = dict.items, list, list.append, sys.modules
    getattribute = object.__getattribute__
    records: list[dict[str, str]] = []
    seen: set[tuple[str, int]] = set()
    loaded: dict[str, type] = {}  # torch's own classes, found once their module is loaded (never imported here)

    def torch_class(module_name: str, name: str) -> type | None:
        if name not in loaded:
            module = modules.get(module_name)
            if module is None:
                return None
            loaded[name] = getattribute(module, name)
        return loaded[name]

    def refuse(value: Any, where: str, kind: str, asks: str) -> None:
        key = (where, id(type(value)))
        if key in seen or len(records) >= MAX_REFUSED:
            return
        seen.add(key)
        append(records, {"where": where, "kind": kind, "type": str(type(value).__name__)[:100], "asks": asks})

    def tensor(value: Any, where: str, dtensor: bool = False) -> TypeGuard[torch.Tensor]:
        """Whether `value` is a tensor of a type the contract allows (torch.Tensor, nn.Parameter, FSDP's FlatParameter,
        torch's AsyncCollectiveTensor around one of those; DTensor with `dtensor`); any other tensor is refused."""
        kind = type(value)
        if kind in plain_types or kind is torch_class(FLAT_PARAMETER, "FlatParameter"):
            return True
        if kind is torch_class(ASYNC, "AsyncCollectiveTensor"):  # its sizes are its inner tensor's, when plain
            return tensor(getattribute(value, "elem"), where)
        if dtensor and kind is torch_class(DTENSOR, "DTensor"):
            return True
        if isinstance(value, base):
            refuse(value, where, "torch.Tensor", PLAIN_DTENSORS if dtensor else PLAIN_TENSORS)
        return False

    def local(value: Any, where: str) -> Any:
        """An allowed DTensor's local tensor (None, refused, where that is not plain), else the value itself."""
        if type(value) is not torch_class(DTENSOR, "DTensor"):
            return value
        inner = getattribute(value, "_local_tensor")
        return inner if tensor(inner, where) else None

    def numel(value: Any) -> int:
        return int(numel_of(value))

    def itemsize(value: Any) -> int:
        return int(element_size(value))

    def nbytes(value: Any) -> int:
        return int(numel_of(value)) * int(element_size(value))

    def dtype(value: Any) -> Any:
        return dtype_of(value)

    def dim(value: Any) -> int:
        return int(dim_of(value))

    def shape(value: Any) -> list[int]:
        return [int(n) for n in size_of(value)]

    def items(value: Any, where: str) -> list[tuple[Any, Any]]:
        """A plain mapping's entries, read by dict's own method; anything else refused, no entry."""
        if type(value) in mappings:
            return list_of(dict_items(value))
        refuse(value, where, "dict" if isinstance(value, dict) else "", "a plain dict")
        return []

    def values(value: Any, where: str) -> list[Any]:
        """A plain list's or tuple's items; anything else refused, no item."""
        if type(value) in sequences:
            return list_of(value)
        refuse(
            value,
            where,
            "list" if isinstance(value, list) else "tuple" if isinstance(value, tuple) else "",
            "a plain list or tuple",
        )
        return []

    def refused() -> list[dict[str, str]]:
        return list_of(records)

    return tensor, numel, itemsize, nbytes, dtype, dim, shape, local, items, values, refused


tensor, numel, itemsize, nbytes, dtype, dim, shape, local, items, values, refused = _bind()


def optimizer_parameters(optimizer: Any) -> list[Any]:
    """The tensors an optimizer's param groups list, each of a type the contract allows (DTensors included): a group,
    list or tensor of another type is refused and left out."""
    groups = [dict(items(group, "optimizer")) for group in values(optimizer.param_groups, "optimizer")]
    return [p for group in groups for p in values(group.get("params", []), "optimizer") if tensor(p, "optimizer", True)]
