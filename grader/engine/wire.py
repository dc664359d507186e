"""The report format between rank processes and the grader.

Ranks run student code, so what they send is untrusted: it is JSON with arrays carried as raw
bytes plus dtype and shape, never a pickle. Decoding cannot execute anything, accepts only plain
numeric dtypes, and is bounded in what it holds and what it builds: a frame of at most
MAX_REPORT_BYTES (refused from its header, before its body is read: `FrameReader`), at most
MAX_REPORT_VALUES JSON values (counted in the bytes before they are parsed), nesting at most
MAX_DEPTH deep, and arrays whose bytes match their shape (so all of them together decode to at most
three quarters of the frame). Anything else is a `WireError` for that rank alone.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from typing import Any

import numpy as np

_ARRAY_KEY = "__array__"
_ALLOWED_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"})
_HEADER = struct.Struct("!Q")
HEADER_BYTES = _HEADER.size
# Measured over every check of every reference solution at W=4 and at W=8: the largest report is ex09's,
# 216,933 bytes of JSON; the most values in one, 5,675 (ex14 at W=8). A report may be 4.8 and 5.8 times
# those. Decoded, a report at both limits holds about 3 MB (2.1 MB for 32,768 values of `[{"a":0},...]`,
# 1.05 MB for a 1 MiB string) and needs at most 4.3 MB while it is decoded: a run of 8 ranks, under 30 MB.
MAX_REPORT_BYTES = 1 << 20
MAX_REPORT_VALUES = 1 << 15
# A trusted worker's report (a job that loads no student code: references, replays, inspections), which only the
# grader's own code composes: ex13's replays of every hypothesis at once are 2.4 MB at W=2 and 4.8 MB at W=4 (about
# 1.15 MB per hypothesis at W=8), arrays for the most part. Bounded still, at the limit every report had before.
TRUSTED_REPORT_BYTES = 64 << 20
MAX_CONTROL_BYTES = 1 << 20  # a launcher's message (the zygote reads its requests in packets of this size)
MAX_DEPTH = 64


class WireError(ValueError):
    """A report that is not in the expected format."""


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(key): _to_jsonable(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(value) for value in obj]
    if isinstance(obj, (str, bool, int, float)) or obj is None:
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if hasattr(obj, "detach") and hasattr(obj, "numpy"):  # a torch.Tensor, without importing torch
        tensor = obj.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()
        obj = tensor.numpy()
    if isinstance(obj, np.ndarray):
        array = np.ascontiguousarray(obj)
        if array.dtype.name not in _ALLOWED_DTYPES:
            raise WireError(f"cannot report an array of dtype {array.dtype}")
        return {
            _ARRAY_KEY: {
                "dtype": array.dtype.name,
                "shape": list(array.shape),
                "data": base64.b64encode(array.tobytes()).decode("ascii"),
            }
        }
    raise WireError(f"cannot report a value of type {type(obj).__name__}")


def _from_jsonable(obj: Any, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"report nested deeper than {MAX_DEPTH} levels")
    if isinstance(obj, list):
        return [_from_jsonable(value, depth + 1) for value in obj]
    if isinstance(obj, dict):
        if set(obj) == {_ARRAY_KEY}:
            return _array(obj[_ARRAY_KEY])
        return {key: _from_jsonable(value, depth + 1) for key, value in obj.items()}
    return obj


def _array(spec: Any) -> np.ndarray:
    if not isinstance(spec, dict) or not isinstance(spec.get("data"), str):
        raise WireError("malformed array in report")
    dtype, shape = spec.get("dtype"), spec.get("shape")
    if dtype not in _ALLOWED_DTYPES:
        raise WireError(f"array of dtype {dtype!r} is not allowed")
    if not isinstance(shape, list) or not all(isinstance(n, int) and 0 <= n for n in shape) or len(shape) > 32:
        raise WireError(f"array of shape {shape!r} is not allowed")
    data = base64.b64decode(spec["data"], validate=True)
    if len(data) != np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64)):
        raise WireError(f"array of shape {shape} does not hold {len(data)} bytes")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def encode(obj: Any) -> bytes:
    """One framed message: an 8-byte length, then the JSON body."""
    body = json.dumps(_to_jsonable(obj), separators=(",", ":")).encode()
    return _HEADER.pack(len(body)) + body


def frame_length(data: bytes | bytearray) -> int | None:
    """The size of the whole frame that `data` begins, once its header is in (None before)."""
    if len(data) < _HEADER.size:
        return None
    return _HEADER.size + _HEADER.unpack_from(data)[0]


def _size(count: int) -> str:
    if count >= 10 << 20 or (count >= 1 << 20 and count % (1 << 20) == 0):
        return f"{count / (1 << 20):,.0f} MB"
    return f"{count:,} bytes"


def too_large(subject: str, size: int, limit: int) -> str:
    """The sentence for a frame over its limit: "rank 2's report is 300 MB, over the grader's limit of 1 MB"."""
    return f"{subject} is {_size(size)}, over the grader's limit of {_size(limit)}"


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def _values(body: bytes | bytearray, limit: int) -> int:
    """How many values and keys `json.loads(body)` can build, at most: the outermost, one after each
    comma and colon, and the first in each container that is not empty. Counting bytes costs
    milliseconds, where decoding a megabyte of `[[],[],...]` builds 22 MB of lists."""
    count = _marks(body)
    return count if count <= limit else _marks(_STRING.sub(b"", body))  # marks inside strings build nothing


def _marks(body: bytes | bytearray) -> int:
    opened = sum(body.count(mark) for mark in (b",", b":", b"[", b"{"))
    return 1 + opened - body.count(b"[]") - body.count(b"{}")


def decode(
    frame: bytes | bytearray,
    subject: str = "the report",
    limit: int = MAX_REPORT_BYTES,
    max_values: int | None = MAX_REPORT_VALUES,
) -> Any:
    """The object in a complete frame; WireError if it is truncated, over `limit` bytes, malformed, or
    would build more than `max_values` values (it is then never parsed). None: a trusted sender's."""
    if len(frame) < _HEADER.size:
        raise WireError("empty or truncated report")
    (length,) = _HEADER.unpack_from(frame)
    if length > limit:
        raise WireError(too_large(subject, length, limit))
    body = frame[_HEADER.size :]
    if len(body) != length:
        raise WireError(
            f"truncated report: {len(body)} of {length} bytes"
            if len(body) < length
            else f"report followed by {len(body) - length} stray bytes"
        )
    if max_values is not None and (values := _values(body, max_values)) > max_values:
        raise WireError(f"{subject} holds {values:,} values, over the grader's limit of {max_values:,}")
    try:
        return _from_jsonable(json.loads(body))
    except WireError:
        raise
    except (ValueError, KeyError, TypeError, RecursionError, MemoryError, binascii.Error) as exc:
        raise WireError(f"malformed report: {type(exc).__name__}: {str(exc)[:200]}") from exc


def report_reader(subject: str, trusted: bool) -> FrameReader:
    """The reader of one rank's report: within the grader's limits, or a trusted worker's (TRUSTED_REPORT_BYTES,
    values not counted) where the job loads no student code."""
    if trusted:
        return FrameReader(subject, TRUSTED_REPORT_BYTES, None)
    return FrameReader(subject)


class FrameReader:
    """One frame as it arrives from a stream, never holding more than `limit` bytes of it: a header that
    announces more refuses the frame at once, and bytes past the frame are counted, not kept. Complete
    once its frame is in or it is refused, so a stray that inherited the stream cannot hold a run open."""

    def __init__(
        self, subject: str = "the report", limit: int = MAX_REPORT_BYTES, max_values: int | None = MAX_REPORT_VALUES
    ) -> None:
        self.subject, self.limit, self.max_values = subject, limit, max_values
        self.received = 0  # bytes, kept or not
        self.complete = False
        self.problem = ""  # why the frame was refused from its header
        self._data = bytearray()
        self._stray = 0

    def add(self, data: bytes) -> None:
        self.received += len(data)
        if self.complete:
            self._stray += len(data)
            return
        taken = max(0, _HEADER.size - len(self._data))
        self._data += data[:taken]
        data = data[taken:]
        expected = frame_length(self._data)
        if expected is None:
            return
        if expected - _HEADER.size > self.limit:
            self.problem = too_large(self.subject, expected - _HEADER.size, self.limit)
            self.complete, self._data = True, bytearray()
            return
        room = expected - len(self._data)
        self._data += data[:room]
        self._stray += max(0, len(data) - room)
        self.complete = len(self._data) == expected

    def decode(self) -> Any:
        """The object in the frame (see `decode`), which is then let go."""
        if self.problem:
            raise WireError(self.problem)
        frame, self._data = self._data, bytearray()
        if self._stray:
            raise WireError("report followed by stray bytes")
        return decode(frame, self.subject, self.limit, self.max_values)
