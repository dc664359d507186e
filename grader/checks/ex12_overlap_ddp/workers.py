"""Rank side of exercise 12: run the student's loop on a model with a tied weight and a frozen
parameter, under the step recorder and the grader's own watch on the all-reduces; trusted workers
for the single-process reference and the replays.

CommRecorder wraps `torch.distributed.all_reduce`. Every call is recorded with the time, the
elements, async_op, the op, whether backward was running and how many of the model's trained
gradients had been accumulated by then (the grader's own post-accumulate-grad hooks, registered
before the student's, count them). An asynchronous call returns a handle that runs the all-reduce
when it is waited for (wait, get_future, is_completed, result...): the contents of the tensor are
undefined until then by the API's contract, and so a handle not waited for before the step has
delivered nothing, the same on every run, where a real backend might or might not have finished.
The calls keep their order on every rank because every rank runs the same code. Inside
`torch.distributed._coalescing_manager` (Megatron-LM's way) an all-reduce is queued and issued at the
manager's exit through the process group's own `allreduce_coalesced`, which the watch on
`dist.all_reduce` never sees; the handle there is the manager's, so the calls made inside it are waited
for by the manager's wait() (async_ops) or at its exit.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from grader.engine import exact
from grader.engine.facts import ReplayRequest, TrainingReplays
from grader.engine.rank_runtime import RankContext
from grader.rank.patches import Patches
from grader.rank.training import FEATURES, MOMENTUM, make_regression, record_training, replay_all, train_reference

WIDTH, NARROW = 12, 10
FROZEN = "frozen.weight"  # the frozen parameter's name
TIED = "shared.weight"  # the tied weight, as model.named_parameters() names it (also `shared_again.weight`)


class TiedRegressor(nn.Module):
    """Linear in, one square layer applied twice through two modules that share its weight (a tied
    weight), a frozen projection (requires_grad=False), Linear out. The parameters' sizes differ
    (96, 12, 144, 10, 1 trained; 120 frozen), so the elements an all-reduce carries say which they are."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(FEATURES, WIDTH)
        self.shared = nn.Linear(WIDTH, WIDTH, bias=False)
        self.shared_again = nn.Linear(WIDTH, WIDTH, bias=False)
        self.shared_again.weight = self.shared.weight
        self.frozen = nn.Linear(WIDTH, NARROW, bias=False)
        self.frozen.weight.requires_grad_(False)
        self.out = nn.Linear(NARROW, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inp(x))
        h = torch.tanh(self.shared(h))
        h = torch.tanh(self.shared_again(h))
        return self.out(self.frozen(h))


def make_tied(seed: int) -> TiedRegressor:
    torch.manual_seed(seed)
    return TiedRegressor()


def rank_indices(steps: int, world_size: int, batch_size: int, rank: int) -> list[list[int]]:
    """Rank r's samples at step s: the r-th block of b in step s's W*b samples."""
    return [
        list(range((s * world_size + rank) * batch_size, (s * world_size + rank + 1) * batch_size))
        for s in range(steps)
    ]


def union_indices(steps: int, world_size: int, batch_size: int) -> list[list[int]]:
    return [list(range(s * world_size * batch_size, (s + 1) * world_size * batch_size)) for s in range(steps)]


class _Deferred:
    """A handle of an asynchronous all-reduce that runs it when it is first waited for."""

    def __init__(
        self, launch: Callable[[], Any], record: dict[str, Any], recorder: CommRecorder, tensor: torch.Tensor
    ) -> None:
        self._launch, self._record, self._recorder, self._work = launch, record, recorder, None
        # the version counter is shared by every view of one buffer (Megatron's contiguous gradient buffer):
        # a write to another bucket's slice bumps it too, so a change counts only where the values moved
        self._tensor, self._version, self._values = tensor, tensor._version, tensor.detach().clone()

    def _started(self, blocking: bool = True) -> Any:
        if self._work is None:
            self._record["waited"] = True
            # written in place between the call and the wait: a real backend may be reading or writing it then
            self._record["modified"] = self._tensor._version != self._version and not torch.equal(
                self._tensor.detach(), self._values
            )
            self._work = self._launch()
        if blocking and "waited_ready" not in self._record:  # the first wait: when, and in backward or not
            self._record["waited_ready"] = self._recorder.ready
            self._record["waited_in_backward"] = self._recorder.depth > 0
        return self._work

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        return self._started().wait(*args, **kwargs)

    def get_future(self) -> Any:
        # the future runs the all-reduce; taking it is no wait (a .then() callback chained in the hook overlaps)
        return self._started(blocking=False).get_future()

    def is_completed(self) -> bool:
        return bool(self._started().is_completed())

    def __getattr__(self, name: str) -> Any:  # result, is_success, exception, synchronize...
        return getattr(self._started(), name)


class CommRecorder:
    def __init__(self, model: nn.Module, facts: dict[str, Any]) -> None:
        self.model, self.facts = model, facts
        self.calls: list[dict[str, Any]] = []
        self.step = 0  # optimizer steps taken so far: the call belongs to step `step + 1`
        self.depth = 0  # backward() calls in progress
        self.backwards = 0  # backward() calls since the last step
        self.ready = 0  # trained gradients accumulated in the current backward
        self.order: list[list[str]] = []  # per step, the order the gradients became ready
        self.registered: dict[str, dict[str, int]] = {}  # parameter -> {"post_accumulate": n, "tensor": n}
        self.frozen_grads: list[str] = []  # per step: "none" or what the frozen parameter's .grad held
        self.unwaited: list[list[int]] = []  # per step, the indices of async calls not waited for at the step
        self.frozen_start: torch.Tensor | None = None  # the frozen parameter when the first step ran
        self._names = {id(p): name for name, p in model.named_parameters()}
        self._trained = [p for p in model.parameters() if p.requires_grad]
        self._patches = Patches()
        self._handles: list[Any] = []
        self._coalesced: list[list[_Deferred]] = []  # per coalescing manager open, the all-reduces called in it

    def install(self) -> CommRecorder:
        for p in self._trained:
            self._handles.append(p.register_post_accumulate_grad_hook(self._accumulated))
        self._handles.append(register_optimizer_step_pre_hook(self._before_step))
        self._patches.replace(dist, "all_reduce", self._all_reduce(dist.all_reduce))
        self._patches.replace(c10d, "all_reduce", dist.all_reduce)
        coalescing = self._coalescing_manager(c10d._coalescing_manager)
        self._patches.replace(c10d, "_coalescing_manager", coalescing)
        self._patches.replace(dist, "_coalescing_manager", coalescing)
        for name in ("register_post_accumulate_grad_hook", "register_hook"):
            self._patches.replace(torch.Tensor, name, self._registration(getattr(torch.Tensor, name), name))
        self._patches.replace(torch.Tensor, "backward", self._backward(torch.Tensor.backward))
        self._patches.replace(torch.autograd, "backward", self._backward(torch.autograd.backward))
        return self

    def close(self) -> None:
        self._patches.restore()
        for handle in self._handles:
            handle.remove()
        self.facts["comm"] = {
            "calls": self.calls,
            "order": self.order,
            "registered": self.registered,
            "frozen_grads": self.frozen_grads,
            "unwaited": self.unwaited,
            "sizes": {name: exact.nbytes(p) for name, p in self.model.named_parameters() if exact.tensor(p, "model")},
            "trained": [self._names[id(p)] for p in self._trained],
        }

    def _accumulated(self, p: torch.Tensor) -> None:
        self.ready += 1
        while len(self.order) <= self.step:
            self.order.append([])
        self.order[self.step].append(self._names.get(id(p), "?"))

    def _backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            recorder.depth += 1
            recorder.backwards += 1
            recorder.ready = 0
            try:
                return original(*args, **kwargs)
            finally:
                recorder.depth -= 1

        return backward

    def _registration(self, original: Callable[..., Any], kind: str) -> Callable[..., Any]:
        recorder = self
        key = "post_accumulate" if kind == "register_post_accumulate_grad_hook" else "tensor"

        @functools.wraps(original)
        def register(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            name = recorder._names.get(id(tensor))
            if name is not None:
                counts = recorder.registered.setdefault(name, {"post_accumulate": 0, "tensor": 0})
                counts[key] += 1
            return original(tensor, *args, **kwargs)

        return register

    def _all_reduce(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        @functools.wraps(original)
        def all_reduce(
            tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None, async_op: bool = False
        ) -> Any:
            record = {
                "step": recorder.step + 1,
                "numel": exact.numel(tensor) if exact.tensor(tensor, "all_reduce call") else 0,
                "async": bool(async_op),
                "op": str(op).rsplit(".", 1)[-1],
                "backward": recorder.depth > 0,
                "after_backward": recorder.depth == 0 and recorder.backwards > 0,
                "ready": recorder.ready,
                "time": time.perf_counter(),
                "waited": not async_op,
            }
            recorder.calls.append(record)
            if not async_op:
                return original(tensor, op=op, group=group, async_op=False)
            handle = _Deferred(lambda: original(tensor, op=op, group=group, async_op=True), record, recorder, tensor)
            if recorder._coalesced:
                recorder._coalesced[-1].append(handle)
            return handle

        return all_reduce

    def _coalescing_manager(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The manager, whose wait() (async_ops) or exit waits for the asynchronous all-reduces called in it:
        their handle is the manager's, as the real one issues them as one at its exit."""
        recorder = self

        @contextlib.contextmanager
        def coalescing_manager(group: Any = None, device: Any = None, async_ops: bool = False) -> Iterator[Any]:
            called: list[_Deferred] = []
            recorder._coalesced.append(called)
            try:
                with original(group, device, async_ops) as manager:
                    yield manager
            finally:
                recorder._coalesced.pop()
            if not async_ops:
                for handle in called:
                    handle.wait()
                return
            wait = manager.wait

            def wait_all() -> None:
                for handle in called:
                    handle.wait()
                wait()

            manager.wait = wait_all

        return coalescing_manager

    def _before_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        frozen = dict(self.model.named_parameters())[FROZEN]
        if self.frozen_start is None:
            self.frozen_start = frozen.detach().cpu().clone()
        grad = frozen.grad
        self.frozen_grads.append("none" if grad is None else f"a tensor of norm {float(grad.float().norm()):.3g}")
        self.unwaited.append(
            [i for i, c in enumerate(self.calls) if c["step"] == self.step + 1 and c["async"] and not c["waited"]]
        )
        self.step += 1
        self.backwards = 0
        self.ready = 0


def _without_frozen(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps without the frozen parameter, which an optimizer may hold or leave out alike."""
    for step in steps:
        for key in ("grads", "params", "state"):
            if isinstance(step.get(key), dict):
                step[key].pop(FROZEN, None)
        if "no_grad" in step:
            step["no_grad"] = [name for name in step["no_grad"] if name != FROZEN]
    return steps


def train(
    ctx: RankContext, steps: int, batch_size: int, lr: float, bucket_bytes: int, data_seed: int, model_seed: int
) -> dict[str, Any]:
    ctx.init_group()
    model = make_tied(seed=model_seed + ctx.rank)  # different on purpose: only the broadcast aligns them
    inputs, targets = make_regression(steps * ctx.world_size * batch_size, data_seed).tensors
    batches = [
        (inputs[i].clone(), targets[i].clone()) for i in rank_indices(steps, ctx.world_size, batch_size, ctx.rank)
    ]
    comm = CommRecorder(model, ctx.facts).install()  # before the student's imports
    train_overlapped = ctx.student("train_overlapped")
    try:
        record_training(
            ctx.facts, model, lambda: train_overlapped(ctx.rank, ctx.world_size, model, batches, lr, bucket_bytes)
        )
    finally:
        comm.close()
    _without_frozen(ctx.facts["steps"])
    frozen = model.frozen.weight.detach().cpu()
    if comm.frozen_start is not None and ctx.facts.get("start"):
        # the frozen parameter where the first step began, whether the optimizer holds it or not
        ctx.facts["start"][FROZEN] = comm.frozen_start
        ctx.facts["frozen_moved"] = float((frozen - comm.frozen_start).abs().max())
    ctx.facts.get("final", {}).pop(FROZEN, None)
    return {}


def reference(
    ctx: RankContext, world_size: int, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int
) -> dict[str, Any]:
    """Trusted: one process from rank 0's initial weights, the union of the ranks' batches per step;
    per step, the mean loss of rank 0's batch at the weights it starts from."""
    dataset = make_regression(steps * world_size * batch_size, data_seed)
    parts = [[batch] for batch in rank_indices(steps, world_size, batch_size, 0)]
    recorder = train_reference(
        make_tied(model_seed), dataset, union_indices(steps, world_size, batch_size), lr, parts=parts
    )
    facts = recorder.facts()
    _without_frozen(facts["steps"])
    facts["momentum"] = MOMENTUM
    return facts


def replays(
    ctx: RankContext,
    world_size: int,
    steps: int,
    batch_size: int,
    lr: float,
    data_seed: int,
    model_seed: int,
    hypotheses: dict[str, ReplayRequest],
) -> TrainingReplays:
    """Trusted: each hypothesis of hypotheses.toml replayed from rank 0's initial weights on the same
    samples: the union batches ("correct") or rank 0's own batches alone ("rank0_own")."""
    dataset = make_regression(steps * world_size * batch_size, data_seed)
    schedules = {
        "correct": union_indices(steps, world_size, batch_size),
        "rank0_own": rank_indices(steps, world_size, batch_size, 0),
    }
    replayed = replay_all(lambda: make_tied(model_seed), dataset, schedules, lr, hypotheses)
    for step in (step for steps_ in replayed["replays"].values() for step in steps_):
        step["grads"].pop(FROZEN, None)
        step["params"].pop(FROZEN, None)
    return replayed
