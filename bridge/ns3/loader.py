"""Load ns-3 through cppyy with only the modules we use, plus our patches.

The stock `from ns import ns` parses all 42 module headers (7-11 s) and recursively globs the
current directory for libraries (it never finished from /usr). Parsing only the headers we call
took about 0.8 s of a 1.2 s start; they now come precompiled, in cling's standard precompiled
header with them added (patches.build_pch), and a start takes 0.35 s, most of it cppyy's own.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from .patches import NS3_MODULES, build_library, build_pch, ns3_prefix, pch_dir

# What the Python side touches besides our patches; whole module headers would add ~1 s.
PYTHON_HEADERS = ["simulator", "config", "global-value", "nstime", "uinteger", "string", "boolean",
                  "rng-seed-manager"]

# EXTRA_CLING_ARGS as cppyy sets it when unset (cppyy_backend.loader.set_cling_compile_options).
CPPYY_DEFAULT_ARGS = ("-O2 -march=native", "-O2")

_loaded: SimpleNamespace | None = None


def load(announce: Callable[[str], None] | None = None) -> SimpleNamespace:
    """Import ns-3 once per process; returns handles `ns` (ns3::) and `wh` (wormhole::), and the
    patch library's path (`library`, for bridge.ns3.engine_api).
    `announce` is told what is built first, if anything (the patches, the precompiled headers)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    t0 = time.perf_counter()
    library = build_library(announce)
    if "cppyy" not in sys.modules:
        _choose_pch(announce)
    t_build = time.perf_counter() - t0
    import cppyy
    import libcppyy

    from ns3_patches import SOURCE_DIR

    prefix = ns3_prefix()
    libcppyy.AddSmartPtrType("Ptr")
    cppyy.add_include_path(f"{prefix}/include")
    cppyy.add_include_path(str(SOURCE_DIR))
    for header in PYTHON_HEADERS:
        cppyy.include(f"ns3/{header}.h")
    for module in NS3_MODULES:
        cppyy.load_library(f"{prefix}/lib64/libns3.44-{module}.so")
    cppyy.load_library(str(library))
    cppyy.include("wormhole-patches.h")
    _loaded = SimpleNamespace(cppyy=cppyy, ns=cppyy.gbl.ns3, wh=cppyy.gbl.wormhole, library=library,
                              patch_build_s=t_build, import_s=time.perf_counter() - t0)
    return _loaded


def _choose_pch(announce: Callable[[str], None] | None) -> None:
    """Point cppyy (CLING_STANDARD_PCH, read as it starts) at our precompiled headers. One the
    user set is left alone; cppyy's standard one or ours, inherited from a parent process that
    loaded ns-3 (maybe another version of the sources), is not. Extra cling flags the user set
    (not cppyy's own defaults, which it sets as it starts and a child inherits), which a PCH must
    have been built with, or WORMHOLE_NO_PCH=1 leave cppyy its standard one (the headers are
    parsed)."""
    current = os.environ.get("CLING_STANDARD_PCH")
    if current and Path(current).parent != pch_dir() and not Path(current).name.startswith("allDict.cxx.pch"):
        return
    os.environ.pop("CLING_STANDARD_PCH", None)
    extra = os.environ.get("EXTRA_CLING_ARGS")
    if extra is not None and extra.strip() not in CPPYY_DEFAULT_ARGS \
            or os.environ.get("WORMHOLE_NO_PCH", "") not in ("", "0"):
        return
    pch = build_pch([f"ns3/{header}.h" for header in PYTHON_HEADERS] + ["wormhole-patches.h"], announce)
    if pch is not None:
        os.environ["CLING_STANDARD_PCH"] = str(pch)


def ns3_version() -> str:
    from importlib.metadata import version

    return version("ns3")
