"""Exercise 8: ring all-reduce from scratch.

`dist.all_reduce` is the one collective DDP lives on. NCCL and gloo implement it (among other
ways) as a **ring**: the W ranks sit on a circle, each sends only to its right neighbour and
receives only from its left one. Write it yourself with point-to-point messages.

Split the (flattened) tensor into W chunks. Chunk sizes may differ by one: the tensor's size need
not be a multiple of W (`tensor.tensor_split(W)` gives such chunks, as views).

1. **Reduce-scatter**, W-1 steps: at step s, rank r sends chunk (r - s) mod W to the right and
   receives chunk (r - s - 1) mod W from the left, adding it to its own copy of that chunk. After
   W-1 steps, rank r holds the complete sum of chunk (r + 1) mod W.
2. **All-gather**, W-1 steps: at step s, rank r sends chunk (r + 1 - s) mod W to the right and
   receives chunk (r - s) mod W from the left, overwriting its copy. Afterwards every rank holds
   every complete chunk.

Each rank sends 2(W-1) chunks of about M/W bytes: 2(W-1)/W x M in total, almost 2M whatever W is.
Sending the whole tensor to every other rank costs (W-1) x M; the grader counts your bytes.

Careful: `dist.send` blocks until the neighbour has received the message. If every rank first
sends and then receives, all of them wait in `send` forever: a deadlock. Start the send with
`dist.isend` (it returns a request), do the blocking `dist.recv`, then `request.wait()`.

Point-to-point only: `dist.send/isend/recv/irecv` (or `dist.batch_isend_irecv`). The grader fails
any call of a built-in collective (all_reduce, all_gather, reduce_scatter, broadcast, reduce...).
The group is already formed; work on CPU tensors.

Run `grader check ex08` to test, `grader hint ex08` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> None:
    """Replace `tensor` (in place) by the sum of every rank's `tensor`, using only send/recv."""
    raise NotImplementedError("ring_all_reduce")
