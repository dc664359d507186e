"""The dispatch-level observer of collectives (grader/rank/dispatched_collectives.py): what each op call is
classified as, and that every route to a collective reaches it (a group of one rank, in this process)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from grader.rank.dispatched_collectives import Collective, CollectiveObserver, ObservedThreads, classify, kind_of

c10d, functional = torch.ops.c10d, torch.ops._c10d_functional


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("allreduce_", "all_reduce"),
        ("all_reduce_coalesced", "all_reduce"),
        ("_allgather_base_", "all_gather"),
        ("allgather_into_tensor_coalesced_", "all_gather"),
        ("_reduce_scatter_base_", "reduce_scatter"),
        ("reduce_", "reduce"),
        ("alltoall_base_", "all_to_all"),
        ("monitored_barrier_", "barrier"),
        ("gather_", "gather"),
        ("scatter_", "scatter"),
        ("isend", "send"),
        ("recv_any_source_", "recv"),
    ],
)
def test_each_op_name_is_its_kind(name: str, kind: str) -> None:
    assert kind_of(name) == kind


def test_a_send_is_point_to_point_with_its_peer_and_what_it_sends() -> None:
    message = torch.zeros(6)
    [call] = classify(c10d.send.default, ([message], None, 3, 0), {})
    assert (call.kind, call.point_to_point, call.root, call.numel, call.dtype) == ("send", True, 3, 6, "float32")
    assert call.contributed[0] is message


class _Claims(torch.Tensor):
    """A tensor subclass that claims another size, dtype and element size, in Python and through torch functions."""

    def numel(self) -> int:
        return 10**6

    def element_size(self) -> int:
        return 8

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in {"numel", "element_size"}:
            return 10**6
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_subclass_cannot_claim_another_size_than_it_holds() -> None:
    claims = torch.zeros(6).as_subclass(_Claims)
    assert claims.numel() == 10**6  # what its own methods say
    [call] = classify(c10d.send.default, ([claims], None, 3, 0), {})
    assert (call.numel, call.dtype, call.largest_bytes) == (6, "float32", 24)


def test_an_all_gather_counts_what_this_rank_puts_in_and_its_whole_buffer() -> None:
    output, given = torch.zeros(8, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    [call] = classify(c10d._allgather_base_.default, (output, given, None, False), {})
    assert (call.name, call.kind, call.numel, call.dtype, call.largest_bytes) == (
        "_allgather_base",
        "all_gather",
        2,
        "float64",
        64,
    )
    assert not call.point_to_point


def test_a_broadcast_has_its_root_and_a_functional_op_its_group() -> None:
    [call] = classify(c10d.broadcast_.default, ([torch.zeros(3)], None, 1, 0, False), {})
    assert (call.kind, call.root) == ("broadcast", 1)
    [call] = classify(functional.all_reduce.default, (torch.zeros(3), "sum", "7"), {})
    assert (call.op, call.kind, call.group, call.root) == (
        "_c10d_functional.all_reduce.default",
        "all_reduce",
        "7",
        None,
    )


def test_a_batch_of_messages_is_one_call_each_and_waits_are_none() -> None:
    a, b = torch.zeros(2), torch.zeros(5)
    calls = classify(functional.batch_p2p_ops.default, (["isend", "irecv"], [1, 2], [0, 0], [a, b], "0"), {})
    assert [(c.kind, c.root, c.numel) for c in calls] == [("send", 1, 2), ("recv", 2, 5)]
    assert classify(functional.wait_tensor.default, (a,), {}) == []
    assert classify(torch.ops.aten.add.Tensor, (a, a), {}) == []


@pytest.fixture
def group_of_one() -> Iterator[dist.ProcessGroup]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        group = dist.group.WORLD
        assert group is not None
        yield group
    finally:
        dist.destroy_process_group()


def test_every_route_to_an_all_reduce_is_seen(group_of_one: dist.ProcessGroup) -> None:
    tensor = torch.ones(4)
    routes: list[Callable[[], object]] = [
        lambda: dist.all_reduce(tensor),
        lambda: group_of_one.allreduce([tensor]).wait(),
        lambda: c10d.allreduce_([tensor], group_of_one.boxed(), torch.classes.c10d.ReduceOp(), None, False),
        lambda: funcol.all_reduce(tensor, "sum", group_of_one).wait(),
    ]
    for route in routes:
        seen: list[Collective] = []
        with CollectiveObserver(seen.append):
            route()
            torch.mm(torch.ones(2, 2), torch.ones(2, 2))  # no collective: not handed on
        assert [(c.kind, c.numel, c.group) for c in seen] == [("all_reduce", 4, group_of_one.group_name)]


def test_a_thread_started_while_observed_is_observed_and_the_threads_are_restored(
    group_of_one: dist.ProcessGroup,
) -> None:
    bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]
    seen: list[Collective] = []
    with ObservedThreads(seen.append):
        helper = threading.Thread(target=dist.broadcast, args=(torch.ones(3), 0))
        helper.start()
        helper.join()
    assert [(c.kind, c.numel, c.root) for c in seen] == [("broadcast", 3, 0)]
    assert threading.Thread._bootstrap_inner is bootstrap  # type: ignore[attr-defined]
