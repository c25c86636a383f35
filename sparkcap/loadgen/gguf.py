"""The metadata of a GGUF file: its header and key-value pairs, never its tensors.

A served GGUF says what its decode steps read (layers, KV heads, head size, experts), and
the diagnosis wants those figures when a fleet file leaves them out. The file is untrusted
input: every length it gives is checked against what the file still holds and against this
module's limits *before* anything is read or allocated, so a truncated, corrupt or hostile
file is one :class:`GGUFError` naming the byte offset and what was being read, never a
``MemoryError``, a crash, or a read of gigabytes. Big arrays (a tokenizer's 262 144 tokens)
are walked past without being kept: only their element type and count are returned.
"""

from __future__ import annotations

import os
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sparkcap.errors import GGUFError

MAGIC = b"GGUF"
# v1 (2023, counts as uint32) was replaced within weeks; v2 and v3 share this layout
SUPPORTED_VERSIONS = (2, 3)
# the metadata of real models is a few MiB (a 262k-token vocabulary is ~5 MiB); a file whose
# key-value section runs past this is not one this reader should walk through
MAX_METADATA_BYTES = 64 << 20
MAX_KV_COUNT = 1 << 16
MAX_KEY_BYTES = 1 << 16  # the GGUF spec caps keys at 65535 bytes
MAX_STRING_BYTES = 1 << 20  # a kept string value (a chat template is ~10 KiB)
MAX_ARRAY_ITEMS = 1 << 24
KEPT_ARRAY_ITEMS = 4096  # arrays up to this many items keep their values
# ... while the file's kept items stay under this: 64 MiB of short arrays, each kept, held
# 2.8-4.1 GB of Python objects; past it an array is counted, its values skipped
MAX_KEPT_ITEMS = 1 << 18
MAX_ARRAY_DEPTH = 4

_SCALARS: dict[int, tuple[str, str]] = {  # value type -> (name, struct format)
    0: ("uint8", "<B"),
    1: ("int8", "<b"),
    2: ("uint16", "<H"),
    3: ("int16", "<h"),
    4: ("uint32", "<I"),
    5: ("int32", "<i"),
    6: ("float32", "<f"),
    7: ("bool", "<B"),
    10: ("uint64", "<Q"),
    11: ("int64", "<q"),
    12: ("float64", "<d"),
}
STRING, ARRAY = 8, 9

Scalar = int | float | bool | str


@dataclass(frozen=True)
class GGUFArray:
    """An array value: its element type and count; ``values`` only when it is short
    (``KEPT_ARRAY_ITEMS``) and of scalars or strings, else None."""

    element_type: str
    count: int
    values: tuple[Scalar, ...] | None


Value = Scalar | GGUFArray


@dataclass(frozen=True)
class GGUFMetadata:
    version: int
    tensor_count: int
    values: dict[str, Value]
    metadata_bytes: int  # where the key-value section ends (the tensor infos start)


class _Reader:
    """Bounded reads of one open file: a length is checked against the bytes left before
    it is read, and nothing is read past ``MAX_METADATA_BYTES``."""

    def __init__(self, f: BinaryIO, size: int, deadline: float | None = None) -> None:
        self.f = f
        self.size = size
        self.pos = 0
        self.kept_items = 0
        # time.monotonic() past which reading stops: the caller's timeout ends its wait, but
        # only the reader itself can stop the thread it runs in
        self.deadline = deadline

    def _room(self, n: int, what: str) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise GGUFError(f"metadata not read within its deadline (at byte {self.pos})")
        if n < 0 or self.pos + n > self.size:
            raise GGUFError(
                f"truncated at byte {self.pos}: {what} needs {n} bytes, "
                f"{self.size - self.pos} left in the file"
            )
        if self.pos + n > MAX_METADATA_BYTES:
            raise GGUFError(
                f"metadata runs past {MAX_METADATA_BYTES >> 20} MiB (at byte {self.pos}, {what})"
            )

    def read(self, n: int, what: str) -> bytes:
        self._room(n, what)
        data = self.f.read(n)
        if len(data) != n:  # the file shrank under us
            raise GGUFError(f"truncated at byte {self.pos}: {what}")
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        self._room(n, what)
        self.f.seek(n, os.SEEK_CUR)
        self.pos += n

    def unpack(self, fmt: str, what: str) -> int | float:
        value: int | float = struct.unpack(fmt, self.read(struct.calcsize(fmt), what))[0]
        return value

    def count(self, what: str) -> int:
        return int(self.unpack("<Q", what))

    def string(self, what: str, limit: int) -> str:
        n = self.count(f"{what}'s length")
        if n > limit:
            raise GGUFError(f"{what} at byte {self.pos} claims {n} bytes (limit {limit})")
        return self.read(n, what).decode("utf-8", errors="replace")

    def skip_string(self, what: str) -> None:
        self.skip(self.count(f"{what}'s length"), what)


def _type_name(code: int, where: str) -> str:
    if code in _SCALARS:
        return _SCALARS[code][0]
    if code == STRING:
        return "string"
    if code == ARRAY:
        return "array"
    raise GGUFError(f"unknown value type {code} {where}")


def _scalar(r: _Reader, code: int, what: str) -> Scalar:
    name, fmt = _SCALARS[code]
    value = r.unpack(fmt, what)
    return bool(value) if name == "bool" else value


def _array(r: _Reader, key: str, depth: int) -> GGUFArray:
    if depth > MAX_ARRAY_DEPTH:
        raise GGUFError(f"{key!r}: arrays nested deeper than {MAX_ARRAY_DEPTH}")
    code = int(r.unpack("<I", f"{key!r}'s array type"))
    element = _type_name(code, f"in the array of {key!r}")
    n = r.count(f"{key!r}'s array length")
    if n > MAX_ARRAY_ITEMS:
        raise GGUFError(f"{key!r}: array of {n} items (limit {MAX_ARRAY_ITEMS})")
    keep = n <= KEPT_ARRAY_ITEMS and code != ARRAY and r.kept_items + n <= MAX_KEPT_ITEMS
    if keep:
        r.kept_items += n
    what = f"{key!r}'s items"
    if code in _SCALARS:
        size = struct.calcsize(_SCALARS[code][1])
        if not keep:
            r.skip(n * size, what)
            return GGUFArray(element, n, None)
        name, fmt = _SCALARS[code]
        raw = struct.unpack(f"<{n}{fmt[1]}", r.read(n * size, what))
        return GGUFArray(element, n, tuple(bool(v) for v in raw) if name == "bool" else raw)
    r._room(n * 8, what)  # every string or array item has at least its 8-byte length
    if code == STRING:
        if not keep:
            for _ in range(n):
                r.skip_string(what)
            return GGUFArray(element, n, None)
        return GGUFArray(element, n, tuple(r.string(what, MAX_STRING_BYTES) for _ in range(n)))
    for _ in range(n):
        _array(r, key, depth + 1)
    return GGUFArray(element, n, None)


def _value(r: _Reader, key: str) -> Value:
    code = int(r.unpack("<I", f"{key!r}'s value type"))
    _type_name(code, f"for key {key!r}")
    if code == STRING:
        return r.string(f"{key!r}'s value", MAX_STRING_BYTES)
    if code == ARRAY:
        return _array(r, key, 1)
    return _scalar(r, code, f"{key!r}'s value")


def read_metadata(path: Path | str, timeout_s: float | None = None) -> GGUFMetadata:
    """The header and every key-value pair of the GGUF file at ``path``; tensor infos and
    data are never read. A FIFO or device (which could block or never end) is refused before
    a byte is read; ``timeout_s`` (None: none) stops the reading itself, not only a wait."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise GGUFError(f"cannot open {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise GGUFError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", buffering=1 << 16) as f:
            fd = -1  # closed with f
            return _read(_Reader(f, info.st_size, deadline))
    except OSError as exc:
        raise GGUFError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)


def _read(r: _Reader) -> GGUFMetadata:
    magic = r.read(4, "the magic number")
    if magic != MAGIC:
        raise GGUFError(f"not a GGUF file (it starts {magic!r}, not {MAGIC!r})")
    version = int(r.unpack("<I", "the version"))
    if version not in SUPPORTED_VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if swapped in SUPPORTED_VERSIONS:
            raise GGUFError(f"big-endian GGUF (version {swapped}) is not supported")
        raise GGUFError(f"GGUF version {version} is not supported (only 2 and 3)")
    tensor_count = r.count("the tensor count")
    kv_count = r.count("the key-value count")
    if kv_count > MAX_KV_COUNT:
        raise GGUFError(f"{kv_count} key-value pairs (limit {MAX_KV_COUNT})")
    values: dict[str, Value] = {}
    for i in range(kv_count):
        key = r.string(f"key {i}", MAX_KEY_BYTES)
        if key in values:
            raise GGUFError(f"key {key!r} appears twice")
        values[key] = _value(r, key)
    return GGUFMetadata(version, tensor_count, values, r.pos)
