"""The report format between rank processes and the grader.

Ranks run student code, so what they send is untrusted: it is JSON with arrays carried as raw
bytes plus dtype and shape, never a pickle. Decoding cannot execute anything, accepts only plain
numeric dtypes, and is bounded: a frame of at most MAX_FRAME_BYTES, nesting at most MAX_DEPTH deep,
arrays whose bytes match their shape. Anything else is a `WireError` for that rank alone.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from typing import Any

import numpy as np

_ARRAY_KEY = "__array__"
_ALLOWED_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"})
_HEADER = struct.Struct("!Q")
HEADER_BYTES = _HEADER.size
MAX_FRAME_BYTES = 64 * 1024 * 1024
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


def decode(frame: bytes) -> Any:
    """The object in a complete frame; WireError if it is truncated, oversized or malformed."""
    if len(frame) < _HEADER.size:
        raise WireError("empty or truncated report")
    (length,) = _HEADER.unpack_from(frame)
    if length > MAX_FRAME_BYTES:
        raise WireError(f"report of {length} bytes is over the limit of {MAX_FRAME_BYTES}")
    body = frame[_HEADER.size :]
    if len(body) != length:
        raise WireError(
            f"truncated report: {len(body)} of {length} bytes"
            if len(body) < length
            else f"report followed by {len(body) - length} stray bytes"
        )
    try:
        return _from_jsonable(json.loads(body))
    except WireError:
        raise
    except (ValueError, KeyError, TypeError, RecursionError, MemoryError, binascii.Error) as exc:
        raise WireError(f"malformed report: {type(exc).__name__}: {str(exc)[:200]}") from exc
