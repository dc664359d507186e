"""Reference solution for exercise 12: data parallelism by hand, with bucketed all-reduces that
overlap backward."""

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
    """One SGD step per batch; gradients averaged across ranks in buckets launched during backward."""
    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    model = model.to(device)
    for p in model.parameters():  # every rank starts from rank 0's weights
        dist.broadcast(p.data, src=0)

    bucket: list[nn.Parameter] = []  # gradients ready, not yet sent
    filled = 0  # bytes in `bucket`
    in_flight: list[tuple[dist.Work, torch.Tensor, list[nn.Parameter]]] = []

    def launch() -> None:
        nonlocal bucket, filled
        flat = torch.cat([p.grad.reshape(-1) for p in bucket])
        in_flight.append((dist.all_reduce(flat, async_op=True), flat, bucket))
        bucket, filled = [], 0

    def grad_ready(p: nn.Parameter) -> None:  # runs once p.grad holds this backward's whole gradient
        nonlocal filled
        bucket.append(p)
        filled += p.grad.numel() * p.grad.element_size()
        if filled >= bucket_bytes:
            launch()

    # parameters() lists a tied weight once and we skip frozen ones: one hook per trained tensor
    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(grad_ready)

    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs.to(device)), targets.to(device))
        loss.backward()
        if bucket:  # the last bucket is launched even when it is not full
            launch()
        for work, flat, params in in_flight:
            work.wait()
            flat /= world_size
            for p, grad in zip(params, flat.split([p.numel() for p in params])):
                p.grad.copy_(grad.view_as(p.grad))
        in_flight.clear()
        optimizer.step()
    return model
