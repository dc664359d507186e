"""Trusted reading of a DCP checkpoint's `.metadata`, a file the student's ranks wrote.

DCP writes it with pickle, and `FileSystemReader.read_metadata` reads it back with a plain `pickle.load`: a
`.metadata` whose pickle names `os.system` runs it in the process that reads it. The trusted worker that
inspects the checkpoint never runs student code, so it reads the file with an unpickler that builds only
what DCP's metadata holds in torch 2.13 (listed from the checkpoints the reference solution and its
alternatives save: DCP's metadata dataclasses, the file system's storage info, torch.Size, dtypes, layouts,
the platform's path) and refuses any other class before it is looked up, let alone called.
"""

from __future__ import annotations

import io
import os
import pathlib
import pickle
import stat
from typing import Any

import torch
import torch.distributed.checkpoint.filesystem as dcp_filesystem
import torch.distributed.checkpoint.metadata as dcp_metadata
import torch.serialization

METADATA = ".metadata"
MAX_BYTES = 16 * 2**20  # the reference's .metadata is 29 KB at W=2, and grows with W: 16 MiB is far above any
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)  # a link is never followed (POSIX; Windows has neither flag)
_NO_WAIT = getattr(os, "O_NONBLOCK", 0)  # a FIFO named .metadata is not waited on: it is refused below
NAME_CHARS = 120  # of a refused name, in the sentence: the name is the student's text


def _allowed() -> dict[tuple[str, str], Any]:
    """(module, name) as pickle names each object DCP's metadata holds, to the object itself."""
    objects: list[Any] = [
        dcp_metadata.Metadata,
        dcp_metadata.TensorStorageMetadata,
        dcp_metadata.BytesStorageMetadata,
        dcp_metadata.ChunkStorageMetadata,
        dcp_metadata.TensorProperties,
        dcp_metadata._MEM_FORMAT_ENCODING,  # TensorProperties' memory format, pickled as this enum
        dcp_metadata.MetadataIndex,
        dcp_metadata.StorageMeta,
        dcp_filesystem._StorageInfo,
        torch.Size,
        torch.serialization._get_layout,  # how a torch.layout pickles: this lookup of its name
        type(pathlib.Path()),  # StorageMeta.checkpoint_id: the path FileSystemWriter was given
    ]
    allowed = {(obj.__module__, obj.__qualname__): obj for obj in objects}
    allowed.update({("torch", name): value for name, value in vars(torch).items() if isinstance(value, torch.dtype)})
    return allowed


ALLOWED = _allowed()


class Refused(pickle.UnpicklingError):
    """A `.metadata` that names what no DCP checkpoint holds: said as a sentence, nothing of it loaded."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = ALLOWED.get((module, name))
        if found is None:
            named = f"{module}.{name}"
            named = named if len(named) <= NAME_CHARS else named[:NAME_CHARS] + "..."
            raise Refused(
                f"the checkpoint's {METADATA} holds a {named}, which a checkpoint never holds: the grader does not "
                "load it"
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise Refused(f"the checkpoint's {METADATA} refers to an object outside it, which a checkpoint never does")


def read_keys(folder: str) -> tuple[list[str], str]:
    """The keys the checkpoint's metadata lists (its state dict's flattened names), and "" ; or no keys and
    a sentence saying why they cannot be read (the file refused, too large, damaged, not DCP's Metadata)."""
    where = os.path.join(folder, METADATA)
    try:
        if not stat.S_ISREG(os.lstat(where).st_mode):
            return [], f"the checkpoint's {METADATA} is not a regular file (a link, say): the grader does not read it"
        descriptor = os.open(where, os.O_RDONLY | _NO_FOLLOW | _NO_WAIT)
    except OSError as exc:
        return [], f"the checkpoint's {METADATA} cannot be opened: {exc.strerror}"
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):  # swapped in after the lstat
            return [], f"the checkpoint's {METADATA} is not a regular file (a link, say): the grader does not read it"
        if info.st_size > MAX_BYTES:
            return [], (
                f"the checkpoint's {METADATA} is {info.st_size} bytes, more than the {MAX_BYTES // 2**20} MiB the "
                "grader reads (DCP's is tens of kilobytes here)"
            )
        data = file.read(MAX_BYTES + 1)
    try:
        metadata = _Unpickler(io.BytesIO(data)).load()
    except Refused as exc:
        return [], str(exc)
    except Exception as exc:  # damaged or not a pickle: said as measured
        return [], f"the checkpoint's {METADATA} is not one DCP wrote: {type(exc).__name__}: {str(exc)[:300]}"
    held = getattr(metadata, "state_dict_metadata", None) if isinstance(metadata, dcp_metadata.Metadata) else None
    if not isinstance(held, dict) or not all(isinstance(key, str) for key in held):
        return [], f"the checkpoint's {METADATA} is not DCP's Metadata with a state dict's names"
    return sorted(held), ""
