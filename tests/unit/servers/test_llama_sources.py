"""The llama.cpp sources are unpacked only where they belong, on every Python 3.11 patch
release: 3.11.0-3.11.3 (Debian 12's own 3.11.2) have no ``extractall(filter=)``, so sparkcap
checks each member itself (``safe_members``) before extracting."""

from __future__ import annotations

import io
import tarfile
import warnings
from pathlib import Path

import pytest

from sparkcap.errors import LocalServerError
from sparkcap.servers.llama import extract_sources, safe_members

PREFIX = "llama_cpp_python-0.3/vendor/llama.cpp/"


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(PREFIX + name if not name.startswith("/") else name)
    info.type, info.linkname = kind, link
    return info


def test_files_folders_and_links_inside_are_kept(tmp_path: Path) -> None:
    members = [
        _member("src", tarfile.DIRTYPE),
        _member("src/llama.cpp"),
        _member("src/alias.h", tarfile.SYMTYPE, "llama.h"),
        _member("src/copy.h", tarfile.LNKTYPE, PREFIX + "src/llama.cpp"),
    ]
    assert safe_members(members, tmp_path) == members


@pytest.mark.parametrize(
    ("member", "words"),
    [
        (_member("../../../../escape.txt"), "path outside"),
        (_member("/etc/cron.d/x"), "path outside"),
        (_member("src/passwd", tarfile.SYMTYPE, "/etc/passwd"), "link outside"),
        (_member("src/up", tarfile.SYMTYPE, "../../../../../etc"), "link outside"),
        (_member("src/fifo", tarfile.FIFOTYPE), "special file"),
        (_member("src/dev", tarfile.CHRTYPE), "special file"),
    ],
)
def test_anything_that_leaves_the_folder_refuses_the_archive(
    tmp_path: Path, member: tarfile.TarInfo, words: str
) -> None:
    with pytest.raises(LocalServerError, match=words):
        safe_members([_member("src/ok.c"), member], tmp_path)


@pytest.mark.parametrize("has_filter", [True, False], ids=["3.11.4+", "3.11.2"])
def test_the_sources_extract_with_or_without_the_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_filter: bool
) -> None:
    """Without ``tarfile.data_filter`` (3.11.0-3.11.3) the checked members extract as with it;
    the rest of the sdist is left packed, and a member that leaves the folder stops both."""
    sdist = tmp_path / "llama_cpp_python-0.3.tar.gz"
    data = b"int main(void) { return 0; }\n"
    with tarfile.open(sdist, mode="w:gz") as tar:
        for name in (PREFIX + "src/main.c", "llama_cpp_python-0.3/setup.py"):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    if not has_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
        # 3.12 and 3.13 warn of 3.14's default filter on a call without one: a Python that
        # lacks the filter (3.11.0-3.11.3) has no such warning
        warnings.filterwarnings("ignore", "Python 3.14 will", DeprecationWarning)
    work = tmp_path / "work"
    work.mkdir()
    extract_sources(sdist, work)
    assert (work / PREFIX / "src" / "main.c").read_bytes() == data
    assert not (work / "llama_cpp_python-0.3" / "setup.py").exists()
    with tarfile.open(sdist, mode="w:gz") as tar:
        info = tarfile.TarInfo(PREFIX + "../../../../escape.c")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(LocalServerError, match="path outside"):
        extract_sources(sdist, tmp_path / "work")
    assert not (tmp_path / "escape.c").exists()
