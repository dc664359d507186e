"""The report format between rank processes and the grader.

Ranks run student code, so what they send is untrusted: it is JSON with arrays carried as raw
bytes plus dtype and shape, never a pickle, sealed by the rank runtime with a key it wrote before
any student code loaded (`sealed_encoder`, `ReportReader`). Decoding cannot execute anything, accepts
only plain numeric dtypes, and is bounded in what it holds and what it builds: a frame of at most
MAX_REPORT_BYTES (refused from its header, before its body is read: `ReportReader`), at most
MAX_REPORT_VALUES JSON values (counted in the bytes before they are parsed), nesting at most
MAX_DEPTH deep, and arrays whose bytes match their shape (so all of them together decode to at most
three quarters of the frame). Anything else is a `WireError` for that rank alone.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import struct
import sys
from collections.abc import Callable
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
OPENING_BYTES = 32  # a rank's report stream opens with its seal's key, written before any student code loads
SEAL_BYTES = 32  # and its report frame ends with the seal: BLAKE2b of the body under that key
NO_REPORT = "no report"


class WireError(ValueError):
    """A report that is not in the expected format."""


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


def _encoder(torch: Any, seal: Any) -> Callable[[Any], bytes]:
    """`encode` as a closure over everything it calls, each looked up once, now: rebinding a name later (a module's
    attribute, a builtin, a method of torch.Tensor) changes nothing in what it writes, and its code reads no global.
    A rank binds its own before any student code loads (`sealed_encoder`). `torch`: the module where tensors may be
    reported (None: none can be); `seal`: the keyed hash whose digest of the body ends the frame, or None."""
    from _json import encode_basestring_ascii, make_encoder
    from builtins import bool, dict, float, int, isinstance, len, list, str, tuple, type  # noqa: UP029 - bound now

    error, pack, base64, join = WireError, _HEADER.pack, binascii.b2a_base64, "".join
    array_key, items = _ARRAY_KEY, dict.items
    names = {np.dtype(name): name for name in _ALLOWED_DTYPES}  # a dtype's own `name` is numpy's Python code
    contiguous, generic, item, ndarray = np.ascontiguousarray, np.generic, np.generic.item, np.ndarray
    # the C encoder json.dumps(obj, separators=(",", ":")) runs, made here: json's module attributes are not read again
    body_of = make_encoder(
        None,
        None,  # type: ignore[arg-type]  # no default: jsonable() leaves only what JSON holds
        encode_basestring_ascii,
        None,
        ":",
        ",",
        False,
        False,
        True,
    )
    tensors: tuple[type, ...] = ()
    if torch is not None:  # torch.Tensor's own methods are Python attributes: the C base class's cannot be rebound
        base = torch._C.TensorBase
        tensors, plain, bfloat16 = (base,), torch._C.DisableTorchFunctionSubclass, torch.bfloat16
        detach, cpu, as_float, as_numpy, dtype_of = base.detach, base.cpu, base.float, base.numpy, base.dtype.__get__

    def tensor_array(tensor: Any) -> Any:
        with plain():  # a subclass's __torch_function__ is not asked how to copy it
            value = cpu(detach(tensor))
            return as_numpy(as_float(value) if dtype_of(value) is bfloat16 else value)

    def jsonable(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {str(key): jsonable(value) for key, value in items(obj)}
        if isinstance(obj, (list, tuple)):
            return [jsonable(value) for value in obj]
        if isinstance(obj, (str, bool, int, float)) or obj is None:
            return obj
        if isinstance(obj, generic):
            return item(obj)
        if isinstance(obj, tensors):
            obj = tensor_array(obj)
        if isinstance(obj, ndarray):
            array = contiguous(obj)
            name = names.get(array.dtype)
            if name is None:
                raise error(f"cannot report an array of dtype {array.dtype}")
            data = base64(array.tobytes(), newline=False).decode("ascii")
            return {array_key: {"dtype": name, "shape": list(array.shape), "data": data}}
        raise error(f"cannot report a value of type {type(obj).__name__}")

    def encode(obj: Any) -> bytes:
        body = join(body_of(jsonable(obj), 0)).encode()
        if seal is None:
            return pack(len(body)) + body
        digest = seal.copy()
        digest.update(body)
        return pack(len(body)) + body + digest.digest()

    return encode


def encode(obj: Any) -> bytes:
    """One framed message: an 8-byte length, then the JSON body."""
    return _encoder(sys.modules.get("torch"), None)(obj)


def sealed_encoder(torch: Any) -> tuple[bytes, Callable[[Any], bytes]]:
    """A rank's report channel, bound before any student code loads: the opening the rank writes first (a key drawn
    now, which the grader reads before that code runs) and the encoder of its one report, whose frame ends with a
    keyed BLAKE2b of its body (the seal). A frame without that seal, or bytes after it, are refused
    (`ReportReader`): code that writes into the channel itself is found out, unless it digs the key out of the
    runtime's memory."""
    key = secrets.token_bytes(OPENING_BYTES)
    return key, _encoder(torch, hashlib.blake2b(key=key, digest_size=SEAL_BYTES))


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


def report_reader(subject: str, trusted: bool) -> ReportReader:
    """The reader of one rank's report: within the grader's limits, or a trusted worker's (TRUSTED_REPORT_BYTES,
    values not counted) where the job loads no student code."""
    if trusted:
        return ReportReader(subject, TRUSTED_REPORT_BYTES, None)
    return ReportReader(subject)


class ReportReader:
    """One rank's report stream as it arrives, never holding more than `limit` bytes of it: the opening (the key its
    runtime drew before any student code ran), then one frame and its seal. A header that announces more than the
    limit refuses the report at once, and bytes past the seal are counted, not kept. Complete once the seal is in or
    the report is refused, so a stray that inherited the stream cannot hold a run open.

    A report the runtime did not seal with the opening's key, or bytes after it, mean that something else wrote into
    the channel (student code that found the descriptor, a process it started): the report is refused, in a sentence.
    """

    def __init__(
        self, subject: str = "the report", limit: int = MAX_REPORT_BYTES, max_values: int | None = MAX_REPORT_VALUES
    ) -> None:
        self.subject, self.limit, self.max_values = subject, limit, max_values
        self.received = 0  # bytes, kept or not, the opening included
        self.complete = False
        self.problem = ""  # why the report was refused from its header
        self._key = bytearray()
        self._data = bytearray()  # the frame, then its seal
        self._stray = 0

    @property
    def reported(self) -> bool:
        """Whether anything came after the opening: a rank that ends before its runtime reports sends only that."""
        return self.received > OPENING_BYTES

    def add(self, data: bytes) -> None:
        self.received += len(data)
        if self.complete:
            self._stray += len(data)
            return
        taken = max(0, OPENING_BYTES - len(self._key))
        self._key += data[:taken]
        data = data[taken:]
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
        room = expected + SEAL_BYTES - len(self._data)
        self._data += data[:room]
        self._stray += max(0, len(data) - room)
        self.complete = len(self._data) == expected + SEAL_BYTES

    def decode(self) -> Any:
        """The object in the report (see `decode`), once its seal is checked; the report is then let go."""
        if self.problem:
            raise WireError(self.problem)
        if not self.reported:
            raise WireError(NO_REPORT)
        data, self._data = self._data, bytearray()
        end = frame_length(data)
        if end is None or len(data) < end:  # the rank ended while it wrote (or code under test wrote this)
            return decode(data, self.subject, self.limit, self.max_values)
        tag = hashlib.blake2b(memoryview(data)[_HEADER.size : end], key=bytes(self._key), digest_size=SEAL_BYTES)
        if len(data) < end + SEAL_BYTES or not hmac.compare_digest(tag.digest(), data[end:]):
            raise WireError(self._foreign("a report the runtime did not seal"))
        if self._stray:
            raise WireError(self.bytes_after())
        del data[end:]
        return decode(data, self.subject, self.limit, self.max_values)

    def bytes_after(self) -> str:
        """Why the report must be refused when bytes came after it, also once it was decoded; "" if none did."""
        return self._foreign("bytes after the runtime's report") if self._stray and not self.problem else ""

    def _foreign(self, what: str) -> str:
        return f"{self.subject} channel was written by something other than the grader's rank runtime: {what}"
