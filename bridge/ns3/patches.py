"""Compile ns3_patches/*.cc into one shared library against the wheel, cached by source hash."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
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
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    h.update(version.encode())
    h.update(str(prefix).encode())
    h.update(" ".join(DEFINES).encode())
    return h.hexdigest()[:16]


def build_library() -> Path:
    """Return the path of the compiled patch library, building it if the sources changed."""
    prefix = ns3_prefix()
    cxx = _compiler()
    target = cache_dir() / _digest(cxx, prefix) / "libwormhole-patches.so"
    if target.exists():
        return target
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
