"""cache_store: schema round trip, torn and corrupt frames, concurrent writers, export/import, gencode.

Real files and real child processes, no mocks.
"""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from cache_store import (
    SCHEMA_VERSION,
    CacheError,
    MemoRecord,
    MemoStore,
    encode_frame,
    format_problem,
    record_id,
)
from cache_store.store import FILE_MAGIC, FRAME_MAGIC

ROOT = Path(__file__).resolve().parents[1]
HEADER_LEN = len(FILE_MAGIC) + 4


def make_record(i: int, fingerprint: str = "f00d") -> MemoRecord:
    """A record exercising every field: flows with a transport-state map, edges."""
    record = MemoRecord(schema_version=SCHEMA_VERSION, fingerprint=fingerprint, graph_hash=f"g{i:04d}",
                        transient_ns=1_000_000 + i, producer="wormhole-sim test / ns-3.44")
    for v in range(3):
        flow = record.flows.add(vertex=v, label=f"r{v}|p{i}", transient_bytes=10_000 * v + i,
                                steady_rate=0.5 + v / 8)
        flow.transport_state.update({"cwnd": 10.0 + v, "ssthresh": 64.0 * (i + 1), "alpha": 1 / 16})
    record.edges.add(a=0, b=1, weight=2)
    record.edges.add(a=1, b=2, weight=1)
    return record


def frame_offsets(records: list[MemoRecord]) -> list[int]:
    """Byte offset of each record's frame in a store written with exactly these records."""
    offsets, pos = [], HEADER_LEN
    for r in records:
        offsets.append(pos)
        pos += len(encode_frame(r))
    return offsets


def run_child(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT)


def test_round_trip_fields_map_edges(tmp_path):
    store = MemoStore(tmp_path / "deep" / "dir" / "memo.whdb")
    records = [make_record(i, fingerprint="ab" if i % 2 else "cd") for i in range(5)]
    store.append(records[0])
    assert store.append_many(records[1:]) == 4
    loaded = store.load()
    assert loaded.problems == []
    assert loaded.schema_version == SCHEMA_VERSION
    assert loaded.records == records
    r = loaded.records[3]
    assert r.flows[2].transport_state == {"cwnd": 12.0, "ssthresh": 256.0, "alpha": 1 / 16}
    assert [(e.a, e.b, e.weight) for e in r.edges] == [(0, 1, 2), (1, 2, 1)]
    assert (r.flows[1].label, r.flows[1].transient_bytes, r.transient_ns) == ("r1|p3", 10_003, 1_000_003)
    assert [record_id(x) for x in loaded.records] == [record_id(x) for x in records]
    assert len({record_id(x) for x in records}) == 5
    assert store.verify().ok and store.verify().n_valid == 5
    stats = store.stats()
    assert stats == {"path": str(store.path), "size_bytes": store.path.stat().st_size, "records": 5,
                     "problems": 0, "fingerprints": {"cd": 3, "ab": 2}, "kinds": {"steady": 5},
                     "schema_version": SCHEMA_VERSION}


def test_record_id_is_deterministic_over_map_order():
    a, b = make_record(1), make_record(1)
    b.flows[0].transport_state.clear()
    b.flows[0].transport_state.update({"alpha": 1 / 16, "ssthresh": 64.0 * 2, "cwnd": 10.0})
    assert record_id(a) == record_id(b)
    assert record_id(a) != record_id(make_record(2))


def test_missing_and_empty_files(tmp_path):
    store = MemoStore(tmp_path / "nowhere" / "memo.whdb")
    loaded = store.load()
    assert (loaded.records, loaded.problems, loaded.schema_version) == ([], [], None)
    assert store.verify().n_valid == 0
    assert store.stats()["size_bytes"] == 0
    store.clear()
    assert not (tmp_path / "nowhere").exists()  # reading and clearing create nothing
    empty = tmp_path / "empty.whdb"
    empty.write_bytes(b"")
    assert MemoStore(empty).load().records == []


def test_torn_header_is_a_problem_and_the_next_append_repairs_it(tmp_path):
    path = tmp_path / "memo.whdb"
    path.write_bytes(FILE_MAGIC[:5])
    loaded = MemoStore(path).load()
    assert loaded.records == [] and [p.reason for p in loaded.problems] == ["torn file header"]
    MemoStore(path).append(make_record(1))
    assert MemoStore(path).load().records == [make_record(1)]
    assert MemoStore(path).verify().ok


KILLED_WRITER = """
import os, signal, sys
from cache_store import MemoRecord, MemoStore, encode_frame
path, first, second = sys.argv[1], bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
MemoStore(path).append(MemoRecord.FromString(first))
frame = encode_frame(MemoRecord.FromString(second))
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
os.write(fd, frame[: len(frame) // 2])  # killed mid-write: half a frame on disk
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_writer_killed_mid_write_leaves_one_torn_frame(tmp_path):
    path = tmp_path / "memo.whdb"
    first, second, third = make_record(1), make_record(2), make_record(3)
    child = run_child(KILLED_WRITER, str(path), first.SerializeToString().hex(),
                      second.SerializeToString().hex())
    assert child.wait(timeout=60) == -signal.SIGKILL
    store = MemoStore(path)
    loaded = store.load()
    assert loaded.records == [first]
    torn = frame_offsets([first, second])[1]
    assert [(p.offset, p.reason) for p in loaded.problems] == [(torn, "torn record")]

    store.append(third)  # another process appends after the torn frame
    loaded = store.load()
    assert loaded.records == [first, third]
    assert [p.offset for p in loaded.problems] == [torn]
    line = format_problem(path, loaded.problems[0])
    assert line.startswith(f"cache {path}: skipped torn") and f"at byte {torn} (" in line
    assert "\n" not in line


CONCURRENT_WRITER = """
import sys
from cache_store import SCHEMA_VERSION, MemoRecord, MemoStore
store, worker = MemoStore(sys.argv[1]), sys.argv[2]
for i in range(int(sys.argv[3])):
    store.append(MemoRecord(schema_version=SCHEMA_VERSION, fingerprint=worker, graph_hash=str(i),
                            producer="x" * (i * 37 % 500), transient_ns=i))
"""


def test_concurrent_appenders_lose_nothing(tmp_path):
    path = tmp_path / "not-yet" / "memo.whdb"  # the writers race to create the directory and header
    workers, each = 4, 50
    children = [run_child(CONCURRENT_WRITER, str(path), f"w{w}", str(each)) for w in range(workers)]
    assert [c.wait(timeout=120) for c in children] == [0] * workers
    loaded = MemoStore(path).load()
    assert loaded.problems == []
    assert Counter(r.fingerprint for r in loaded.records) == {f"w{w}": each for w in range(workers)}
    for w in range(workers):  # each writer's records stay in its own order
        assert [r.transient_ns for r in loaded.records if r.fingerprint == f"w{w}"] == list(range(each))


@pytest.mark.parametrize(("field", "delta"), [("frame magic", 1), ("length low byte", 4),
                                              ("length high byte", 6), ("crc", 9), ("payload", 40)])
def test_flipped_byte_loses_only_its_record(tmp_path, field, delta):
    store = MemoStore(tmp_path / "memo.whdb")
    records = [make_record(i) for i in range(3)]
    store.append_many(records)
    at = frame_offsets(records)[1]
    data = bytearray(store.path.read_bytes())
    data[at + delta] ^= 0x10
    store.path.write_bytes(bytes(data))
    report = store.verify()
    assert report.n_valid == 2, field
    assert [p.offset for p in report.problems] == [at], field
    assert store.load().records == [records[0], records[2]]


def test_garbage_between_frames_and_newer_record_schema(tmp_path):
    store = MemoStore(tmp_path / "memo.whdb")
    store.append(make_record(1))
    newer = make_record(2)
    newer.schema_version = SCHEMA_VERSION + 1
    with store.path.open("ab") as f:
        f.write(b"\x00garbage" + FRAME_MAGIC[:2] + b"!!")
        f.write(encode_frame(newer))
    store.append(make_record(3))
    loaded = store.load()
    assert loaded.records == [make_record(1), make_record(3)]
    assert [p.reason for p in loaded.problems] == ["unreadable bytes", "record of a newer schema"]
    with pytest.raises(ValueError, match="schema_version"):
        store.append(newer)
    with pytest.raises(ValueError, match="schema_version"):
        store.append(MemoRecord(fingerprint="unset"))


def test_not_a_store_and_newer_header_raise_cache_error(tmp_path):
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello, this is not a memo store\n")
    for action in (lambda s: s.load(), lambda s: s.append(make_record(1)), lambda s: s.clear(),
                   lambda s: s.stats()):
        with pytest.raises(CacheError, match="not a wormhole memo store") as err:
            action(MemoStore(foreign))
        assert str(foreign) in str(err.value) and "\n" not in str(err.value)
    assert foreign.read_text() == "hello, this is not a memo store\n"  # untouched

    newer = tmp_path / "newer.whdb"
    newer.write_bytes(struct.pack("<8sI", FILE_MAGIC, SCHEMA_VERSION + 1) + encode_frame(make_record(1)))
    with pytest.raises(CacheError, match=r"schema version 2 is newer") as err:
        MemoStore(newer).load()
    assert str(newer) in str(err.value)
    with pytest.raises(CacheError):
        MemoStore(newer).append(make_record(2))


def test_export_dedupes_and_skips_corrupt(tmp_path):
    src = MemoStore(tmp_path / "memo.whdb")
    a, b = make_record(1), make_record(2)
    src.append_many([a, b, a])
    with src.path.open("ab") as f:
        f.write(encode_frame(make_record(3))[:-3])  # torn tail
    dest = tmp_path / "out" / "export.whdb"
    assert src.export(dest) == 2
    exported = MemoStore(dest).load()
    assert exported.records == [a, b] and exported.problems == []
    assert sorted(p.name for p in dest.parent.iterdir()) == ["export.whdb"]  # no temp file left
    assert src.export(src.path) == 2  # compaction in place
    assert src.load().records == [a, b] and src.verify().ok


def test_import_from_adds_only_new_records(tmp_path):
    a, b, c = make_record(1), make_record(2), make_record(3)
    mine, theirs = MemoStore(tmp_path / "mine.whdb"), MemoStore(tmp_path / "theirs.whdb")
    mine.append_many([a, b])
    theirs.append_many([b, c, c])
    assert mine.import_from(theirs.path) == 1
    assert mine.load().records == [a, b, c]
    assert mine.import_from(theirs.path) == 0
    assert mine.import_from(mine.path) == 0
    with pytest.raises(CacheError, match="no such file"):
        mine.import_from(tmp_path / "missing.whdb")


def test_clear_removes_the_file_only(tmp_path):
    store = MemoStore(tmp_path / "memo.whdb")
    store.append(make_record(1))
    (tmp_path / "other").write_text("keep")
    store.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]
    store.append(make_record(2))
    assert store.load().records == [make_record(2)]


def test_committed_gencode_is_reproducible(tmp_path):
    from cache_store.generate import generate

    fresh = generate(tmp_path)
    committed = ROOT / "cache_store" / "memo_pb2.py"
    assert fresh.read_bytes() == committed.read_bytes(), "run `python -m cache_store.generate` and commit"
