"""Exercise 12: data parallelism by hand, communication overlapped with backward.

DDP (exercise 3) hides two ideas you now write yourself:

1. **Same start.** Broadcast rank 0's weights to every rank before training
   (`dist.broadcast(p.data, src=0)` for each parameter). The grader initialises every rank
   *differently* on purpose: only your broadcast makes the copies agree.
2. **Averaged gradients, overlapped with backward.** backward computes gradients from the last
   layer to the first. The last layers' gradients are final long before backward ends, so their
   all-reduce can run *while* the earlier layers are still being differentiated. Waiting for
   `loss.backward()` to return and then all-reducing everything wastes that time: on a GPU cluster
   the communication is often as long as backward itself.

How: register a hook on every trained parameter with `p.register_post_accumulate_grad_hook(hook)`.
autograd calls `hook(p)` once `p.grad` holds this backward's whole gradient: after it has been
accumulated into `.grad`. A *tensor* hook (`p.register_hook`) runs earlier, on the incoming gradient,
before `.grad` is written: `p.grad` there is still None (first step) or last step's value.

Sending one message per parameter costs a latency each; DDP groups gradients into **buckets** of
about `bucket_cap_mb` (25 MB by default). Here the size is `bucket_bytes`, and the rule is:

* in the hook, add `p` to the open bucket (its bytes: `p.grad.numel() * p.grad.element_size()`);
  as soon as the bucket holds `bucket_bytes` or more, launch it and open a new, empty one;
* launching: flatten the bucket's gradients into one tensor (`torch.cat` of `g.reshape(-1)`, or
  `torch._utils._flatten_dense_tensors`) and start `dist.all_reduce(flat, async_op=True)`; it returns
  a handle at once, and the communication runs while backward goes on;
* after `loss.backward()` returns, launch what is left in the open bucket (it may never fill);
* then, **before `optimizer.step()`**, `handle.wait()` for *every* handle, divide each result by
  `world_size` (all_reduce sums; we want the average) and copy it back into the parameters' `.grad`
  (`torch._utils._unflatten_dense_tensors`, or `flat.split([...])`). Clear the list of handles.

(Closing a bucket just before it would pass `bucket_bytes` is accepted too, and so is planning the
buckets in the order of `model.parameters()` or its reverse.)

Two kinds of parameters need care:

* a **tied weight** (one tensor used by two layers, as GPT ties its embedding and output layer)
  appears once in `model.parameters()` and gets one hook: its gradient from both uses is summed in
  `.grad` before the hook runs. Registering per module, or over `named_parameters(remove_duplicate=False)`,
  reduces it twice;
* a **frozen** parameter (`requires_grad=False`) gets no gradient, no hook (registering one raises)
  and no place in any bucket: its `.grad` stays None.

Your `train_overlapped` runs on every rank; the group is formed. `batches` is this rank's list of
`(inputs, targets)` pairs, one per optimizer step ((b, 8) and (b, 1) tensors). For each batch:
`optimizer.zero_grad()`, the mean squared error (`torch.nn.functional.mse_loss`), `loss.backward()`,
the waits, `optimizer.step()`, with `torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)`.
No DistributedDataParallel. Under nccl, use `torch.device("cuda", rank)`. Return the model.

The grader checks that every step equals one process training on all ranks' batches together, and
watches your all-reduces itself: when each starts (during backward?), with `async_op` or not, how
many per step, how many elements, and whether each was waited for before the step.

API: `torch.distributed.broadcast`, `torch.distributed.all_reduce(tensor, async_op=True)`,
`Work.wait()`, `torch.Tensor.register_post_accumulate_grad_hook`, `torch.cat`, `torch.Tensor.split`.

Run `grader check ex12` to test, `grader hint ex12` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def train_overlapped(
    rank: int,
    world_size: int,
    model: nn.Module,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    bucket_bytes: int,
) -> nn.Module:
    """Train `model` one SGD step per batch, averaging gradients in buckets launched during backward."""
    raise NotImplementedError("train_overlapped")
