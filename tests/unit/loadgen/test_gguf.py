"""The GGUF metadata reader on files written here (every value type, arrays short and long),
on truncated and hostile bytes, and on the cached Gemma 3 270M GGUF when it is there."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest

from sparkcap.errors import GGUFError
from sparkcap.loadgen import gguf
from sparkcap.loadgen.discover import gguf_rows
from sparkcap.loadgen.gguf import GGUFArray, read_metadata
from sparkcap.settings import get_settings

pytestmark = pytest.mark.unit

FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B"}
FORMATS |= {10: "<Q", 11: "<q", 12: "<d"}


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def value(code: int, v: Any) -> bytes:
    if code == 8:
        return s(v)
    if code == 9:
        element, items = v
        return struct.pack("<IQ", element, len(items)) + b"".join(value(element, i) for i in items)
    return struct.pack(FORMATS[code], v)


def gguf_bytes(kvs: list[tuple[str, int, Any]], version: int = 3, tensors: int = 7) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, tensors, len(kvs))
    body = b"".join(s(k) + struct.pack("<I", code) + value(code, v) for k, code, v in kvs)
    # a tensor info after the metadata: never read
    return head + body + s("token_embd.weight") + b"\xff" * 64


EVERY_TYPE: list[tuple[str, int, Any]] = [
    ("general.architecture", 8, "llama"),
    ("general.name", 8, "tiny ✓"),
    ("t.u8", 0, 200),
    ("t.i8", 1, -5),
    ("t.u16", 2, 65000),
    ("t.i16", 3, -30000),
    ("t.u32", 4, 4_000_000_000),
    ("t.i32", 5, -2_000_000_000),
    ("t.f32", 6, 0.5),
    ("t.bool", 7, 1),
    ("t.u64", 10, 2**63),
    ("t.i64", 11, -(2**62)),
    ("t.f64", 12, 1e-6),
    ("t.ints", 9, (5, [1, 2, 3])),
    ("t.strings", 9, (8, ["a", "", "ccc"])),
    ("t.nested", 9, (9, [(0, [1, 2]), (8, ["x"])])),
    ("llama.block_count", 4, 32),
    ("llama.attention.head_count", 4, 32),
    ("llama.attention.head_count_kv", 4, 8),
    ("llama.embedding_length", 4, 4096),
]


def write(tmp_path: Path, data: bytes, name: str = "m.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_every_value_type_is_read(tmp_path: Path) -> None:
    meta = read_metadata(write(tmp_path, gguf_bytes(EVERY_TYPE)))
    v = meta.values
    assert (meta.version, meta.tensor_count) == (3, 7)
    assert v["general.architecture"] == "llama" and v["general.name"] == "tiny ✓"
    assert (v["t.u8"], v["t.i8"], v["t.u16"], v["t.i16"]) == (200, -5, 65000, -30000)
    assert (v["t.u32"], v["t.i32"], v["t.u64"], v["t.i64"]) == (
        4_000_000_000,
        -2_000_000_000,
        2**63,
        -(2**62),
    )
    assert v["t.f32"] == 0.5 and v["t.f64"] == pytest.approx(1e-6) and v["t.bool"] is True
    assert v["t.ints"] == GGUFArray("int32", 3, (1, 2, 3))
    assert v["t.strings"] == GGUFArray("string", 3, ("a", "", "ccc"))
    assert v["t.nested"] == GGUFArray("array", 2, None)
    assert list(v) == [k for k, _, _ in EVERY_TYPE]
    # the key-value section ends where the tensor infos begin
    assert meta.metadata_bytes == len(gguf_bytes(EVERY_TYPE)) - len(s("token_embd.weight")) - 64


def test_version_2_reads_like_3(tmp_path: Path) -> None:
    assert read_metadata(write(tmp_path, gguf_bytes(EVERY_TYPE, version=2))).version == 2


def test_a_long_array_is_walked_past_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gguf, "KEPT_ARRAY_ITEMS", 2)
    kvs = [("tok", 9, (8, ["<s>", "a", "bb"])), ("scores", 9, (6, [0.0] * 5)), ("after", 4, 9)]
    v = read_metadata(write(tmp_path, gguf_bytes(kvs))).values
    assert v["tok"] == GGUFArray("string", 3, None)
    assert v["scores"] == GGUFArray("float32", 5, None)
    assert v["after"] == 9  # read at the right place after both


@pytest.mark.reliability
def test_many_short_arrays_keep_a_bounded_number_of_values_and_reading_has_a_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's kept values are bounded (past the bound an array keeps its count, not its
    values: 64 MiB of short arrays, each kept, would hold 2.8-4.1 GB), and a deadline given to
    the reader stops the reading itself (a timeout that ends only the wait leaves a thread
    reading on)."""
    monkeypatch.setattr(gguf, "MAX_KEPT_ITEMS", 1000)
    kvs = [(f"a{i}", 9, (0, [i % 256] * 300)) for i in range(10)] + [("after", 4, 9)]
    path = write(tmp_path, gguf_bytes(kvs))
    v = read_metadata(path).values
    kept = [v[f"a{i}"] for i in range(10)]
    assert [a.values is not None for a in kept] == [True] * 3 + [False] * 7  # 900 of 1000
    assert all(a.count == 300 for a in kept) and v["after"] == 9
    with pytest.raises(GGUFError, match="metadata not read within its deadline"):
        read_metadata(path, timeout_s=-1)


HUGE = 2**62


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "truncated at byte 0"),
        (b"GGU", "truncated at byte 0"),
        (b"PK\x03\x04" + b"\0" * 40, "not a GGUF file"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1 is not supported"),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, HUGE), "key-value pairs"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", HUGE), "claims"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 100) + b"abc", "truncated"),
        (gguf_bytes([("k", 8, "abcdef")])[:-90], "truncated"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<I", 99), "value type 99"),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IIQ", 9, 4, HUGE),
            "array of",
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IIQ", 9, 8, 1 << 20),
            "truncated",
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IIQ", 9, 10, 1 << 23),
            "truncated",
        ),
        (
            b"GGUF"
            + struct.pack("<IQQ", 3, 0, 1)
            + s("k")
            + struct.pack("<I", 9)
            + struct.pack("<IQ", 9, 1) * 6,
            "nested deeper",
        ),
        (gguf_bytes([("k", 4, 1), ("k", 4, 2)]), "appears twice"),
    ],
)
def test_truncated_or_hostile_bytes_are_one_clear_error(
    tmp_path: Path, data: bytes, needle: str
) -> None:
    with pytest.raises(GGUFError, match=needle):
        read_metadata(write(tmp_path, data))


def test_a_length_past_the_file_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A string claiming 1 MiB in a 60-byte file: no read of that size is ever asked for."""
    path = write(
        tmp_path, b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IQ", 8, 1 << 20)
    )
    sizes: list[int] = []
    real_init = gguf._Reader.__init__

    class Spied:
        def __init__(self, f: Any) -> None:
            self.f = f

        def read(self, n: int) -> bytes:
            sizes.append(n)
            return bytes(self.f.read(n))

        def seek(self, n: int, whence: int) -> int:
            return int(self.f.seek(n, whence))

    def spy(self: gguf._Reader, f: Any, size: int, deadline: float | None = None) -> None:
        real_init(self, Spied(f), size, deadline)

    monkeypatch.setattr(gguf._Reader, "__init__", spy)
    with pytest.raises(GGUFError, match="truncated"):
        read_metadata(path)
    assert max(sizes) < 64


def test_metadata_past_the_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gguf, "MAX_METADATA_BYTES", 100)
    with pytest.raises(GGUFError, match="metadata runs past"):
        read_metadata(write(tmp_path, gguf_bytes(EVERY_TYPE)))


def test_what_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)  # opening a FIFO to read would wait for a writer forever
    with pytest.raises(GGUFError, match="not a regular file"):
        read_metadata(fifo)
    with pytest.raises(GGUFError, match="not a regular file"):
        read_metadata(tmp_path)
    with pytest.raises(GGUFError, match="cannot open"):
        read_metadata(tmp_path / "absent.gguf")


# with the real-server tests, after make test's llama-server build has assembled the model: in
# the parallel run it would skip whenever the build had not got that far yet
@pytest.mark.real_server
def test_the_cached_gemma_gguf_when_present() -> None:
    """The real file ``sparkcap.servers.llama.ensure_model`` assembles (never fetched here):
    Gemma 3 270M has 18 layers, one KV head and 256-wide keys and values."""
    path = get_settings().cache_dir / "models" / "gemma-3-270m-q4_k_m.gguf"
    if not path.is_file():
        pytest.skip(f"no cached model at {path}")
    meta = read_metadata(path)
    assert meta.values["general.architecture"] == "gemma3"
    assert meta.values["gemma3.block_count"] == 18
    tokens = meta.values["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GGUFArray) and tokens.count == 262144 and tokens.values is None
    (row,) = gguf_rows(meta)
    assert (row.fact, row.value, row.source) == ("kv_bytes_per_token", 18 * 1 * 512 * 2, "gguf")
