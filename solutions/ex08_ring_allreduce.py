"""Reference solution for exercise 8: ring all-reduce from point-to-point messages."""

from __future__ import annotations

import torch
import torch.distributed as dist


def _exchange(send: torch.Tensor, receive: torch.Tensor, right: int, left: int) -> None:
    """Send to the right while receiving from the left; the send must not block the receive."""
    request = dist.isend(send, right)
    dist.recv(receive, left)
    request.wait()


def ring_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place: reduce-scatter, then all-gather, around the ring."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        return
    flat = tensor.view(-1)
    chunks = list(flat.tensor_split(world))
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):  # reduce-scatter: afterwards chunk (rank + 1) % world is complete here
        outgoing, incoming = (rank - step) % world, (rank - step - 1) % world
        received = torch.empty_like(chunks[incoming])
        _exchange(chunks[outgoing], received, right, left)
        chunks[incoming] += received
    for step in range(world - 1):  # all-gather: pass the complete chunks on around the ring
        outgoing, incoming = (rank + 1 - step) % world, (rank - step) % world
        _exchange(chunks[outgoing], chunks[incoming], right, left)
