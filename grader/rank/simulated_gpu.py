"""A CPU process that believes it runs on a node of GPUs, so that device choice is checked on laptops.

Every API torch 2.13 offers to find, choose and bind a GPU answers as it would on a node of `gpus`
GPUs, and they agree with each other: torch.cuda (is_available, device_count, set_device,
current_device, device), torch.accelerator (is_available, current_accelerator, device_count,
set_device_index and its alias set_device_idx, current_device_index and current_device_idx,
device_index), torch.get_device_module and torch.distributed.is_nccl_available
(`get_default_backend_for_device` already maps cuda to nccl). Binding an index the node does not
have raises as CUDA does ("invalid device ordinal"). Every binding is recorded, in order, for the
judge. Nothing runs on a GPU: only questions about GPUs are answered.

Install it before the student's module is imported: `from torch.cuda import set_device` binds
whatever is there at import time.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from grader.engine import tamper


class SimulatedGpuNode:
    """The GPUs of one node, the one this process has bound, and each binding as it happens."""

    def __init__(
        self,
        gpus: int,
        record: Callable[[dict[str, Any]], None] = lambda event: None,
        on_query: Callable[[dict[str, Any]], None] = lambda event: None,
    ) -> None:
        self.gpus = gpus
        self.current = 0
        self.bindings = 0
        self._record = record
        self._on_query = on_query

    def query(self, api: str) -> int:
        """The bound GPU, as current_device() answers; each question recorded with whether anything had
        been bound yet, so the judge can tell "asked before set_device" from what it sees."""
        self._on_query({"call": "current_device", "api": api, "answer": self.current, "after_bind": self.bindings > 0})
        return self.current

    def index(self, device: Any) -> int | None:
        """The GPU an argument names (3, "cuda:3", torch.device("cuda", 3); "cuda" is the bound
        one), or None if it names none."""
        if isinstance(device, (str, torch.device)):
            try:
                parsed = torch.device(device)
            except RuntimeError:
                return None
            if parsed.type != "cuda":
                return None
            return self.current if parsed.index is None else parsed.index
        try:
            return operator.index(device)
        except TypeError:
            return None

    def bind(self, device: Any, api: str) -> None:
        index = self.index(device)
        self._record({"call": "set_device", "api": api, "device": index, "argument": repr(device)[:80]})
        if index is None or not 0 <= index < self.gpus:
            raise RuntimeError(
                f"CUDA error: invalid device ordinal ({api}({device!r}) on a node with "
                f"{self.gpus} GPU{'s' if self.gpus > 1 else ''})"
            )
        self.current = index
        self.bindings += 1

    @contextlib.contextmanager
    def scoped(self, device: Any, api: str) -> Iterator[None]:
        """`with torch.cuda.device(i):` binds i inside the block only (None: no change)."""
        previous = self.current
        if device is not None:
            self.bind(device, api)
        try:
            yield
        finally:
            self.current = previous

    def install(self) -> None:
        cuda, accelerator, device_module = torch.cuda, torch.accelerator, torch.get_device_module
        replacements: dict[Any, dict[str, Callable[..., Any]]] = {
            cuda: {
                "is_available": lambda: True,
                "device_count": lambda: self.gpus,
                "set_device": lambda device: self.bind(device, "torch.cuda.set_device"),
                "current_device": lambda: self.query("torch.cuda.current_device"),
                "device": lambda device: self.scoped(device, "torch.cuda.device"),
            },
            accelerator: {
                "is_available": lambda: True,
                "current_accelerator": lambda check_available=False: torch.device("cuda"),
                "device_count": lambda: self.gpus,
                "set_device_index": lambda device: self.bind(device, "torch.accelerator.set_device_index"),
                "set_device_idx": lambda device: self.bind(device, "torch.accelerator.set_device_idx"),
                "current_device_index": lambda: self.query("torch.accelerator.current_device_index"),
                "current_device_idx": lambda: self.query("torch.accelerator.current_device_idx"),
                "device_index": lambda device: self.scoped(device, "torch.accelerator.device_index"),
            },
            torch: {"get_device_module": lambda device=None: cuda if device is None else device_module(device)},
            dist: {"is_nccl_available": lambda: True},
        }
        for owner, functions in replacements.items():
            for name, function in functions.items():
                tamper.install(owner, name, function)
