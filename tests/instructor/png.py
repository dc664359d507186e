"""Read a PNG (8-bit RGB or RGBA, not interlaced: what Chromium writes) into a numpy array.

The screenshot tests count the pixels of a colour; this keeps them free of an imaging library the
test extra does not install. Rows filtered with Sub and Up are undone with numpy; Average and Paeth,
whose bytes depend on the byte just decoded, byte by byte.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _paeth(left: int, up: int, corner: int) -> int:
    estimate = left + up - corner
    to_left, to_up, to_corner = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
    if to_left <= to_up and to_left <= to_corner:
        return left
    return up if to_up <= to_corner else corner


def read_png(path: Path) -> np.ndarray:
    data = path.read_bytes()
    assert data.startswith(SIGNATURE), f"{path} is not a PNG"
    position, compressed = len(SIGNATURE), b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, "only 8-bit RGB(A), not interlaced"
        elif kind == b"IDAT":
            compressed += body
    channels = 3 if colour == 2 else 4
    stride = width * channels
    raw = zlib.decompress(compressed)
    image = np.zeros((height, stride), dtype=np.uint8)
    previous = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1)
        if kind == 0:
            row = line.copy()
        elif kind == 1:
            row = (np.cumsum(line.reshape(width, channels).astype(np.int64), axis=0) % 256).astype(np.uint8).ravel()
        elif kind == 2:
            row = line + previous
        else:
            pixels = bytearray(line.tobytes())
            up = previous.tobytes()
            for i in range(stride):
                left = pixels[i - channels] if i >= channels else 0
                if kind == 3:
                    pixels[i] = (pixels[i] + (left + up[i]) // 2) & 255
                else:
                    corner = up[i - channels] if i >= channels else 0
                    pixels[i] = (pixels[i] + _paeth(left, up[i], corner)) & 255
            row = np.frombuffer(bytes(pixels), np.uint8)
        image[y] = row
        previous = row
    return image.reshape(height, width, channels)


def count_colour(image: np.ndarray, hex_colour: str, tolerance: int = 3) -> int:
    target = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    return int((np.abs(image[..., :3].astype(np.int16) - target) <= tolerance).all(axis=-1).sum())
