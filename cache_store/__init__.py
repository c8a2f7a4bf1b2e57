"""Memoized transients on disk: the ``MemoRecord`` protobuf schema and a crash-safe, multi-process store.

Knows nothing of ns-3 or of ``bridge`` (bridge imports cache_store, never the reverse)::

    from cache_store import MemoStore, MemoRecord, SCHEMA_VERSION
    store = MemoStore("~/.cache/wormhole/memo.whdb")
    store.append(MemoRecord(schema_version=SCHEMA_VERSION, fingerprint="ab12", graph_hash="cd34"))
    loaded = store.load()  # loaded.records, loaded.problems (skipped torn/corrupt frames)
"""

from __future__ import annotations

from .memo_pb2 import Edge, FlowRecord, MemoRecord
from .store import (
    SCHEMA_VERSION,
    CacheError,
    Loaded,
    MemoStore,
    Problem,
    VerifyReport,
    encode_frame,
    format_problem,
    parse,
    record_id,
    record_kind,
)

__all__ = [
    "SCHEMA_VERSION",
    "CacheError",
    "Edge",
    "FlowRecord",
    "Loaded",
    "MemoRecord",
    "MemoStore",
    "Problem",
    "VerifyReport",
    "encode_frame",
    "format_problem",
    "parse",
    "record_id",
    "record_kind",
]
