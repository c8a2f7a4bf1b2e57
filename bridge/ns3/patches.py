"""Compile ns3_patches/*.cc into one shared library against the wheel, and cling's precompiled
header with the headers the Python side parses, both cached by source hash."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from ns3_patches import SOURCE_DIR

from ..errors import WormholeError

NS3_MODULES = ["core", "network", "internet", "point-to-point", "traffic-control", "applications"]
# The wheel is built with logging and asserts on; headers must see the same configuration.
DEFINES = ["-DNS3_LOG_ENABLE", "-DNS3_ASSERT_ENABLE", "-DNS3_BUILD_PROFILE_RELEASE"]


def ns3_prefix() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("ns3")
    if spec is None or not spec.submodule_search_locations:
        raise WormholeError("ns-3 is not installed: pip install ns3 (see README)")
    return Path(list(spec.submodule_search_locations)[0])


def cache_dir() -> Path:
    root = os.environ.get("WORMHOLE_BUILD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "wormhole", "patches")
    return Path(root)


def pch_dir() -> Path:
    return cache_dir() / "pch"


def sources() -> list[Path]:
    return sorted(SOURCE_DIR.glob("*.cc")) + sorted(SOURCE_DIR.glob("*.h"))


def _compiler() -> str:
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise WormholeError(f"no C++ compiler found ({cxx!r}): install g++ to build ns3_patches/")
    return cxx


def _digest(cxx: str, prefix: Path) -> str:
    h = hashlib.sha256()
    for path in sources():
        h.update(path.name.encode())
        h.update(path.read_bytes())
    compiler = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    h.update(compiler.encode())
    # (the wheel's version too: an upgrade in place keeps the prefix and changes the headers)
    h.update(f"{prefix} ns3 {version('ns3')}".encode())
    h.update(" ".join(DEFINES).encode())
    return h.hexdigest()[:16]


def build_library(announce: Callable[[str], None] | None = None) -> Path:
    """Return the path of the compiled patch library, building it if the sources changed (after
    `announce` says so)."""
    prefix = ns3_prefix()
    cxx = _compiler()
    target = cache_dir() / _digest(cxx, prefix) / "libwormhole-patches.so"
    if target.exists():
        return target
    if announce is not None:
        announce("compiling ns3_patches, once per version of the sources: about 40 s")
    target.parent.mkdir(parents=True, exist_ok=True)
    libs = [f"-lns3.44-{m}" for m in NS3_MODULES]
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        cmd = [cxx, "-O2", "-std=c++20", "-fPIC", "-shared", *DEFINES, f"-I{prefix}/include",
               f"-I{SOURCE_DIR}", *map(str, sorted(SOURCE_DIR.glob("*.cc"))),
               f"-L{prefix}/lib64", f"-Wl,-rpath,{prefix}/lib64", *libs, "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr[-300:])
            raise WormholeError(f"building ns3_patches failed: {first.strip()}")
        os.replace(out, target)  # atomic: a concurrent build of the same sources wins equally
    return target


def _cling_dir() -> Path:
    import importlib.util

    return Path(importlib.util.find_spec("cppyy_backend").origin).parent


def build_pch(headers: list[str], announce: Callable[[str], None] | None = None) -> Path | None:
    """Return cling's precompiled header (cppyy's standard one: its C++ standard library and
    runtime) with `headers` added, building it if they or the patches changed (after `announce`
    says so); None, with a warning, if it cannot be built (the headers are then parsed at each
    start). Parsing them took 0.8 of the 1.2 s each simulation's child process spent loading
    ns-3; the PCH takes 5 s to build."""
    pkg = _cling_dir()
    h = hashlib.sha256(_digest(_compiler(), ns3_prefix()).encode())
    # (cppyy rebuilds a PCH older than its include folder, as the standard one: without ours)
    for part in (version("cppyy-cling"), str((pkg / "include").stat().st_mtime_ns), *headers,
                 (pkg / "etc/dictpch/allCppflags.txt").read_text()):
        h.update(part.encode())
    target = pch_dir() / f"{h.hexdigest()[:16]}.pch"
    if target.exists():
        try:
            os.utime(target)  # in use: kept by _prune_pchs
        except OSError:
            pass              # a read-only cache: nothing prunes it either
        return target
    if announce is not None:
        announce("precompiling the ns-3 headers, once per version of the sources: about 5 s")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _prune_pchs(target.parent)
        failed = _make_pch(pkg, headers, target)
    except OSError as e:
        failed = str(e)
    if failed:
        print(f"wormhole: warning: could not precompile the ns-3 headers ({failed[:200]}); "
              "each run parses them (about 0.8 s more)", file=sys.stderr)
        return None
    return target


def _make_pch(pkg: Path, headers: list[str], target: Path) -> str | None:
    """What cppyy_backend's etc/dictpch/makepch.py runs for its standard PCH, with `headers`;
    returns why it failed, if it did."""
    flags = [ln.strip() for ln in (pkg / "etc/dictpch/allCppflags.txt").read_text().splitlines()
             if ln.strip() and ln.strip() != "-isystem"]
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [str(pkg / "bin/rootcling"), "-rootbuild", "-generate-pch", "-f", f"{tmp}/allDict.cxx",
               "-noDictSelection", "-D__CLING__", "-DROOT_PCH", "-I./include", "-I./etc", "-I./etc/dictpch",
               "-I./etc/cling", f"-I{ns3_prefix()}/include", f"-I{SOURCE_DIR}", *DEFINES,
               "-cxxflags", " ".join(flags), "etc/dictpch/allHeaders.h", *headers, "etc/dictpch/allLinkDefs.h"]
        # (not the cling settings a process that loaded ns-3 passes on: the PCH is the same whoever builds it)
        env = {k: v for k, v in os.environ.items() if k not in ("EXTRA_CLING_ARGS", "CLING_STANDARD_PCH")}
        env["LD_LIBRARY_PATH"] = f"{pkg / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}"
        try:
            proc = subprocess.run(cmd, cwd=pkg, env=env, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return "rootcling took over 600 s"
        if proc.returncode != 0:
            return (proc.stderr.strip().splitlines() or ["rootcling failed"])[-1]
        # cling aborts the process on a PCH it cannot read: try this one in a throwaway process.
        check = subprocess.run([sys.executable, "-c", "import cppyy; cppyy.gbl.ns3.Simulator; cppyy.gbl.wormhole"],
                               env={**env, "CLING_STANDARD_PCH": f"{tmp}/allDict_rdict.pch"},
                               capture_output=True, text=True, timeout=600)
        if check.returncode != 0:
            return f"cppyy could not start with it (exit code {check.returncode})"
        os.replace(f"{tmp}/allDict_rdict.pch", target)  # atomic, as the library
    return None


def _prune_pchs(folder: Path, unused_s: float = 7 * 86400) -> None:
    """Remove the PCHs no run used for a week (50 MB each, one per version of the sources)."""
    for path in folder.glob("*.pch"):
        try:
            if time.time() - path.stat().st_mtime > unused_s:
                path.unlink()
        except OSError:
            pass          # another process removed or replaced it
