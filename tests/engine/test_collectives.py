"""How ranks' logged collective calls are compared (grader/engine/collectives.py), without starting ranks:
a difference is named only where both calls, or a peer's departure, are known; correct code's legitimate
differences (shapes of equal size, all_gather's lists, a peer not there yet) never are one."""

from __future__ import annotations

from typing import Any

import pytest

from grader.engine.collectives import Call, Log, find_mismatch, peers_done

STUDENT = "/course/ex03_train_ddp.py"
WORLD = "0#1"


def _log(rank: int, *calls: Call, left: str = "", counts: int | None = None, members: list[int] | None = None) -> Log:
    log = Log(rank, global_rank=rank)
    log.members[WORLD] = members if members is not None else [0, 1]
    log.calls[WORLD] = dict(enumerate(calls))
    if left:
        log.left, log.function = left, "train_ddp"
        log.counts = {WORLD: len(calls) if counts is None else counts}
    return log


def _call(op: str, numel: int | None = 4, dtype: str = "float32", root: int | None = None, line: int = 40) -> Call:
    return Call(op, root, numel, None if numel is None else dtype, line, "train_ddp")


def _said(fact: dict[str, Any] | None) -> list[tuple[int, str]]:
    assert fact is not None
    return [(c["rank"], c.get("op") or f"returned from {c['returned']}") for c in fact["calls"]]


BARRIER = _call("barrier", numel=None)


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        (_call("all_reduce"), _call("broadcast", root=0)),
        (_call("all_reduce", numel=4), _call("all_reduce", numel=5)),
        (_call("all_reduce", dtype="float32"), _call("all_reduce", dtype="float64")),
        (_call("broadcast", root=0), _call("broadcast", root=1)),
        (BARRIER, _call("all_reduce")),
    ],
)
def test_another_operation_root_size_or_dtype_at_the_same_call_is_a_mismatch(mine, theirs):
    fact = find_mismatch(_log(0, BARRIER, mine), [_log(1, BARRIER, theirs)], (WORLD, 1), STUDENT)
    assert _said(fact) == [(0, mine.op), (1, theirs.op)]
    assert fact is not None and fact["group_size"] == 2


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        (_call("all_reduce", line=40), _call("all_reduce", line=41)),  # the same call from another line
        (_call("all_gather", numel=4), _call("all_gather", numel=6)),  # uneven all_gather: legitimate
        (_call("gather", numel=4, root=0), _call("gather", numel=None, root=0)),
    ],
)
def test_calls_that_agree_where_ranks_must_agree_are_no_mismatch(mine, theirs):
    assert find_mismatch(_log(0, mine), [_log(1, theirs)], (WORLD, 0), STUDENT) is None


def test_a_peer_that_has_not_reached_the_call_yet_is_no_mismatch():
    assert find_mismatch(_log(0, BARRIER, _call("all_reduce")), [_log(1, BARRIER)], (WORLD, 1), STUDENT) is None


def test_the_first_differing_call_is_the_one_named():
    mine = _log(0, BARRIER, _call("all_reduce", numel=4), _call("broadcast", root=0))
    theirs = _log(1, BARRIER, _call("all_reduce", numel=5), _call("barrier", numel=None))
    fact = find_mismatch(mine, [theirs], (WORLD, 2), STUDENT)
    assert fact is not None and [c["numel"] for c in fact["calls"]] == [4, 5]


def test_a_peer_that_returned_without_the_call_this_rank_waits_in_has_left():
    fact = find_mismatch(_log(0, BARRIER, BARRIER), [_log(1, BARRIER, left="returned")], (WORLD, 1), STUDENT)
    assert _said(fact) == [(0, "barrier"), (1, "returned from train_ddp")]


def test_peers_waiting_in_the_same_call_are_named_beside_those_that_left():
    group = [0, 1, 2]
    mine = _log(0, BARRIER, BARRIER, members=group)
    peers = [_log(1, BARRIER, left="returned", members=group), _log(2, BARRIER, BARRIER, members=group)]
    fact = find_mismatch(mine, peers, (WORLD, 1), STUDENT)
    assert _said(fact) == [(0, "barrier"), (1, "returned from train_ddp"), (2, "barrier")]
    assert fact is not None and fact["group_size"] == 3


@pytest.mark.parametrize(
    ("peer", "members"),
    [
        (_log(1, BARRIER, left="raised"), [0, 1]),  # its own error is the cause, named as such
        (_log(1, BARRIER, BARRIER, left="returned"), [0, 1]),  # it made the call: it waits in vain elsewhere
        (_log(1, BARRIER, left="returned"), [0, 2]),  # not a member of the group this rank waits on
    ],
)
def test_a_peer_that_raised_made_the_call_or_is_no_member_has_not_left(peer, members):
    mine = _log(0, BARRIER, BARRIER, members=members)
    assert find_mismatch(mine, [peer], (WORLD, 1), STUDENT) is None


def test_each_group_is_compared_with_its_own_calls():
    mine, theirs = _log(0, BARRIER), _log(1, BARRIER)
    mine.calls["1#1"] = {0: _call("all_reduce")}
    theirs.calls["2#1"] = {0: _call("broadcast", root=1)}
    assert find_mismatch(mine, [theirs], ("1#1", 0), STUDENT) is None


DONE = {WORLD: 1}  # this rank's calls per group when it returned from the student's function: one barrier


@pytest.mark.parametrize(
    ("peers", "done"),
    [
        ([_log(1, BARRIER, left="returned")], True),  # every peer returned from it too
        ([_log(1)], None),  # a peer still before the barrier: not known yet
        ([_log(1, BARRIER)], None),  # a peer past it, not returned yet
        ([_log(1, BARRIER, BARRIER)], False),  # a peer in a call this rank never made: nobody joins it
        ([_log(1, left="raised")], False),  # a peer failed
        ([_log(1, BARRIER, left="returned"), _log(2, BARRIER)], None),  # one of two peers still in the function
    ],
)
def test_a_rank_that_returned_waits_for_its_peers_until_they_returned_or_one_never_can(peers, done):
    mine = _log(0, BARRIER, members=[0, 1, 2][: len(peers) + 1])
    assert peers_done(mine, DONE, peers, world_size=len(peers) + 1) is done


def test_a_peers_call_in_a_group_this_rank_is_no_member_of_is_none_of_its_business():
    peer = _log(1, BARRIER)
    peer.calls["2#1"], peer.members["2#1"] = {0: _call("all_reduce")}, [1, 2]
    assert peers_done(_log(0, BARRIER), DONE, [peer, _log(2, BARRIER)], world_size=3) is None


def test_a_peer_whose_log_is_not_found_yet_is_waited_for():
    assert peers_done(_log(0, BARRIER), DONE, [], world_size=2) is None
