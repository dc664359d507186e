"""The report format between rank processes and the grader.

Ranks run student code, so what they send is untrusted: it is JSON with arrays carried as raw
bytes plus dtype and shape, never a pickle. Decoding cannot execute anything, and only plain
numeric dtypes are accepted.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import numpy as np

_ARRAY_KEY = "__array__"
_ALLOWED_DTYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"}
)
_HEADER = struct.Struct("!Q")


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


def _from_jsonable(obj: Any) -> Any:
    if isinstance(obj, list):
        return [_from_jsonable(value) for value in obj]
    if isinstance(obj, dict):
        if set(obj) == {_ARRAY_KEY}:
            spec = obj[_ARRAY_KEY]
            dtype = spec.get("dtype")
            if dtype not in _ALLOWED_DTYPES:
                raise WireError(f"array of dtype {dtype!r} is not allowed")
            data = base64.b64decode(spec["data"])
            return np.frombuffer(data, dtype=dtype).reshape(spec["shape"]).copy()
        return {key: _from_jsonable(value) for key, value in obj.items()}
    return obj


def encode(obj: Any) -> bytes:
    """One framed message: an 8-byte length, then the JSON body."""
    body = json.dumps(_to_jsonable(obj), separators=(",", ":")).encode()
    return _HEADER.pack(len(body)) + body


def decode(frame: bytes) -> Any:
    """The object in a complete frame; WireError if it is truncated or malformed."""
    if len(frame) < _HEADER.size:
        raise WireError("empty or truncated report")
    (length,) = _HEADER.unpack_from(frame)
    body = frame[_HEADER.size :]
    if len(body) != length:
        raise WireError(f"truncated report: {len(body)} of {length} bytes")
    try:
        return _from_jsonable(json.loads(body))
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(f"malformed report: {exc}") from exc
