"""Facts the grader reads from objects the code under test hands back cannot be chosen by those objects: each forgery
of hostile.FORGERIES passed its check before (a subclass lying about its size, a launcher writing the grader's
records about processes it never started) and now fails it, saying why; and the guard itself
(grader/engine/exact.py) reads through what a subclass overrides."""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import describe

from grader.engine import exact
from security.hostile import FORGERIES, Forgery


@pytest.mark.parametrize("forgery", FORGERIES, ids=lambda f: f.name)
def test_a_forged_fact_fails_its_check_saying_why(grade, tmp_path: Path, forgery: Forgery) -> None:
    if forgery.exercise == "ex04_launch" and not sys.platform.startswith("linux"):
        pytest.skip("ex04's processes are observed through Linux /proc only")
    results = grade(forgery.exercise, forgery.write(tmp_path), world_sizes=(2,), checks={forgery.check})
    assert results and all(r.status == "failed" for r in results), describe(results)
    assert all(forgery.said in r.message for r in results), describe(results)


class Lying(torch.Tensor):
    """Overrides what a careless reader asks: its size, its element size, its dtype."""

    def numel(self) -> int:
        return 1

    def element_size(self) -> int:
        return 1


class Intercepting(torch.Tensor):
    """Answers every torch function called on it, torch's own C methods included."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return 7


class LyingDict(dict):
    def items(self):
        return []

    def __len__(self) -> int:
        return 0


class LyingList(list):
    def __iter__(self):
        return iter(())


def test_the_guard_reads_sizes_through_torch_and_refuses_any_subclass() -> None:
    before = len(exact.refused())
    plain, parameter = torch.zeros(6, dtype=torch.float64), torch.nn.Parameter(torch.zeros(2, 3))
    assert exact.tensor(plain, "test") and exact.tensor(parameter, "test")
    assert (exact.numel(plain), exact.nbytes(plain), exact.dtype(plain)) == (6, 48, torch.float64)
    assert exact.nbytes(parameter) == 24 and exact.dim(parameter) == 2
    lying, intercepting = torch.zeros(8).as_subclass(Lying), torch.zeros(8).as_subclass(Intercepting)
    assert lying.numel() == 1 and intercepting.numel() == 7  # what a careless reader would have believed
    assert not exact.tensor(lying, "optimizer state") and not exact.tensor(intercepting, "all_reduce call")
    assert not exact.tensor(5, "all_reduce call")  # not a tensor at all: nothing read, nothing refused
    held = LyingDict(a=torch.zeros(3))
    assert exact.items(held, "optimizer state") == []
    assert exact.items(collections.defaultdict(dict, a=1), "optimizer state") == [("a", 1)]
    assert exact.values(LyingList([1, 2]), "optimizer") == [] and exact.values((1, 2), "optimizer") == [1, 2]
    assert exact.refused()[before:] == [
        {"where": "optimizer state", "kind": "torch.Tensor", "type": "Lying", "asks": "plain tensors"},
        {"where": "all_reduce call", "kind": "torch.Tensor", "type": "Intercepting", "asks": "plain tensors"},
        {"where": "optimizer state", "kind": "dict", "type": "LyingDict", "asks": "a plain dict"},
        {"where": "optimizer", "kind": "list", "type": "LyingList", "asks": "a plain list or tuple"},
    ]


def test_rebinding_torchs_python_methods_changes_nothing_the_guard_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.Tensor, "numel", lambda self: 1, raising=False)
    monkeypatch.setattr(torch.Tensor, "element_size", lambda self: 1, raising=False)
    assert torch.zeros(5).numel() == 1
    assert exact.numel(torch.zeros(5)) == 5 and exact.nbytes(torch.zeros(5)) == 20


def test_the_guard_reads_shapes_and_item_sizes_and_looks_inside_torchs_async_collective_tensor() -> None:
    from torch.distributed._functional_collectives import AsyncCollectiveTensor

    before = len(exact.refused())
    plain = torch.zeros(2, 3, dtype=torch.float16)
    assert (exact.shape(plain), exact.itemsize(plain), exact.shape(torch.tensor(1.0))) == ([2, 3], 2, [])
    assert exact.tensor(AsyncCollectiveTensor(plain), "collective call")  # torch's own, around a plain tensor
    assert not exact.tensor(AsyncCollectiveTensor(torch.zeros(4).as_subclass(Lying)), "collective call")
    assert exact.refused()[before:] == [
        {"where": "collective call", "kind": "torch.Tensor", "type": "Lying", "asks": "plain tensors"}
    ]
