"""Regenerate ``memo_pb2.py`` from ``memo.proto`` with grpcio-tools' bundled protoc.

Run ``python -m cache_store.generate`` after editing the schema and commit both files. The output depends
only on the protoc version, which the ``test`` extra pins (grpcio-tools), so it is reproducible.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the directory holding the cache_store package
PROTO = "cache_store/memo.proto"  # its name in the descriptor pool, relative to ROOT
LINT_EXEMPT = "# Generated code: `python -m cache_store.generate` adds this lint exemption.\n# ruff: noqa\n"


def generate(out_root: str | Path | None = None) -> Path:
    """Write ``<out_root>/cache_store/memo_pb2.py`` (default: in place) and return its path."""
    from grpc_tools import protoc  # test/dev dependency only

    out = Path(out_root) if out_root is not None else ROOT
    (out / "cache_store").mkdir(parents=True, exist_ok=True)
    rc = protoc.main(["protoc", f"--proto_path={ROOT}", f"--python_out={out}", str(ROOT / PROTO)])
    if rc != 0:
        raise RuntimeError(f"protoc failed on {ROOT / PROTO} (exit {rc})")
    target = out / "cache_store" / "memo_pb2.py"
    first, rest = target.read_text().split("\n", 1)  # keep protoc's coding line first
    target.write_text(f"{first}\n{LINT_EXEMPT}{rest}")
    return target


if __name__ == "__main__":
    print(generate(sys.argv[1] if len(sys.argv) > 1 else None))
