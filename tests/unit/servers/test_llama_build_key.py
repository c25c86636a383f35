"""A cached llama-server is reused only where everything its compile depends on is the same:
the build cache outlives SPARKCAP_CACHE, so a key that left out an input would serve a binary
compiled from other source, flags or toolchain."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from sparkcap.servers import llama


def _key(monkeypatch: pytest.MonkeyPatch, **versions: str) -> str:
    def version(cmd: Sequence[str]) -> str:
        return versions.get(cmd[0], f"{cmd[0]} 1.0")

    monkeypatch.setattr(llama, "_first_line", version)
    llama.build_key_inputs.cache_clear()
    try:
        return llama.build_key()
    finally:
        llama.build_key_inputs.cache_clear()


def test_the_key_changes_with_each_input_of_the_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    base = _key(monkeypatch)
    assert _key(monkeypatch) == base
    assert _key(monkeypatch, **{"c++": "c++ (Debian 13.1.0) 13.1.0"}) != base
    assert _key(monkeypatch, cmake="cmake version 3.31.0") != base
    monkeypatch.setattr(llama, "LLAMA_CPP_PYTHON_SHA256", "0" * 64)
    assert _key(monkeypatch) != base
    monkeypatch.undo()
    monkeypatch.setattr(llama, "CMAKE_FLAGS", (*llama.CMAKE_FLAGS, "-DGGML_OPENMP=OFF"))
    assert _key(monkeypatch) != base
    monkeypatch.undo()
    monkeypatch.setattr(llama, "UNITY_INCLUDE", llama.UNITY_INCLUDE.replace("16", "8"))
    assert _key(monkeypatch) != base


def test_the_binary_lives_outside_sparkcap_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI empties SPARKCAP_CACHE to prove the download; the compile is kept elsewhere."""
    from sparkcap.settings import get_settings

    monkeypatch.setenv("SPARKCAP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARKCAP_BUILD_CACHE", str(tmp_path / "build"))
    assert get_settings().build_cache_dir == tmp_path / "build"
    path = llama.server_binary_path()
    assert path.is_relative_to(tmp_path / "build")
    assert not path.is_relative_to(tmp_path / "cache")


def test_a_missing_tool_is_part_of_the_key_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError("cmake")

    monkeypatch.setattr(subprocess, "run", missing)
    assert llama._first_line(["cmake", "--version"]) == "cmake: not found"
