"""What exercise 4's workers and its judge agree on: the result each launched function returns (larger
than a pipe holds, different per grading and rank) and how long the healthy ranks sleep when one fails."""

from __future__ import annotations

import hashlib

SLOW_RANK_SECONDS = 20.0  # longer than the failing rank takes to exit, even a fresh interpreter at load 30


def payload(seed: int, rank: int, size: int) -> str:
    """A rank's result: `size` characters that depend on the grading and the rank."""
    block = hashlib.sha256(f"{seed}:{rank}".encode()).hexdigest()
    return (block * (size // len(block) + 1))[:size]


def digest(text: str) -> str:
    """What travels back in place of a result's megabytes."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
