"""An embedded, append-only memo store: one local file of CRC-framed ``MemoRecord`` messages.

File layout (integers little-endian)::

    header = FILE_MAGIC (8 bytes) + u32 schema version
    frame  = FRAME_MAGIC (4 bytes) + u32 payload length + u32 crc32(payload) + payload
    payload = MemoRecord.SerializeToString(deterministic=True)

Writers append whole frames under an exclusive ``flock`` on an ``O_APPEND`` descriptor and ``fsync``
before unlocking, so several processes may append at once and a writer killed mid-write leaves at most
one torn frame. Readers skip torn or corrupt frames, reporting each as a :class:`Problem`, and
resynchronize on the next ``FRAME_MAGIC``: every complete record stays readable.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import struct
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError

from .memo_pb2 import MemoRecord

SCHEMA_VERSION = 1
FILE_MAGIC = b"\x89WHMEMO\n"
FRAME_MAGIC = b"\xe7WHr"
_HEADER = struct.Struct("<8sI")  # FILE_MAGIC, schema version
_FRAME = struct.Struct("<4sII")  # FRAME_MAGIC, payload length, crc32


class CacheError(Exception):
    """The store file cannot be used (not a store, newer schema, I/O error); one line naming the file."""


@dataclass(frozen=True)
class Problem:
    """A stretch of the file the reader skipped: where it starts, what it is, and details."""

    offset: int
    reason: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.reason} at byte {self.offset}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Loaded:
    """The valid records of a store file, in file order, and what was skipped."""

    records: list[MemoRecord] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    schema_version: int | None = None  # from the file header; None for a missing or empty file


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of :meth:`MemoStore.verify`."""

    n_valid: int
    problems: list[Problem]

    @property
    def ok(self) -> bool:
        return not self.problems


def record_id(record: MemoRecord) -> str:
    """The sha256 hex digest of the record's deterministic serialization (for dedupe and choice)."""
    return hashlib.sha256(record.SerializeToString(deterministic=True)).hexdigest()


def record_kind(record: MemoRecord) -> str:
    """Its kind: "steady", "truncated" (cut short before a flow's end) or "episode" (kept until
    every flow ended)."""
    return "episode" if record.episode else "truncated" if record.truncated else "steady"


def encode_frame(record: MemoRecord) -> bytes:
    """The bytes of one frame holding ``record``."""
    payload = record.SerializeToString(deterministic=True)
    return _FRAME.pack(FRAME_MAGIC, len(payload), zlib.crc32(payload)) + payload


def format_problem(path: str | os.PathLike[str], problem: Problem) -> str:
    """One line for a user, e.g. ``cache /x/memo.whdb: skipped torn record at byte 1234 (...)``."""
    return f"cache {path}: skipped {problem}"


def _header_version(head: bytes, path: object) -> int | None:
    """The schema version in a file's first bytes; None if empty or a torn header; CacheError if not ours."""
    if len(head) < _HEADER.size and FILE_MAGIC.startswith(head[: len(FILE_MAGIC)]):
        return None
    magic, version = _HEADER.unpack_from(head) if len(head) >= _HEADER.size else (head[:8], 0)
    if magic != FILE_MAGIC:
        raise CacheError(f"{path}: not a wormhole memo store (file starts with {head[:8]!r})")
    if version == 0:
        raise CacheError(f"{path}: corrupt memo store header (schema version 0)")
    if version > SCHEMA_VERSION:
        raise CacheError(f"{path}: memo store schema version {version} is newer than this wormhole-sim "
                         f"supports ({SCHEMA_VERSION}); upgrade it or use another cache file")
    return version


def parse(data: bytes, path: object = "<memory>") -> Loaded:
    """Decode the bytes of a whole store file (``path`` only names it in errors)."""
    out = Loaded()
    out.schema_version = _header_version(data[: _HEADER.size], path)
    if out.schema_version is None:
        if data:
            out.problems.append(Problem(0, "torn file header", f"{len(data)} of {_HEADER.size} bytes"))
        return out
    pos, end = _HEADER.size, len(data)

    def next_frame(start: int) -> int:
        found = data.find(FRAME_MAGIC, start)
        return end if found < 0 else found

    while pos < end:
        if pos + _FRAME.size > end or data[pos : pos + 4] != FRAME_MAGIC:
            nxt = next_frame(pos + 1)
            if nxt == end and pos + _FRAME.size > end and FRAME_MAGIC.startswith(data[pos : pos + 4]):
                out.problems.append(Problem(pos, "torn record", f"frame header cut short: {end - pos} bytes"))
            else:
                out.problems.append(Problem(pos, "unreadable bytes", f"no frame marker; {nxt - pos} bytes"))
            pos = nxt
            continue
        _, length, crc = _FRAME.unpack_from(data, pos)
        stop = pos + _FRAME.size + length
        payload = data[pos + _FRAME.size : stop]
        if stop > end or zlib.crc32(payload) != crc:
            nxt = next_frame(pos + 1)
            if nxt < min(stop, end):
                out.problems.append(Problem(pos, "torn or corrupt record", f"declares {length} payload "
                                            f"bytes but the next frame starts at byte {nxt}"))
            elif stop > end:
                out.problems.append(Problem(pos, "torn record", f"declares {length} payload bytes, "
                                            f"{end - pos - _FRAME.size} present"))
            else:
                out.problems.append(Problem(pos, "corrupt record", f"crc mismatch; {nxt - pos} bytes"))
            pos = nxt
            continue
        record = MemoRecord()
        try:
            record.ParseFromString(payload)
        except DecodeError as exc:
            out.problems.append(Problem(pos, "unparsable record", (str(exc).splitlines() or [""])[0]))
        else:
            if record.schema_version > SCHEMA_VERSION:
                out.problems.append(Problem(pos, "record of a newer schema",
                                            f"version {record.schema_version} > {SCHEMA_VERSION}"))
            elif record.schema_version == 0:
                out.problems.append(Problem(pos, "record without schema version"))
            else:
                out.records.append(record)
        pos = stop
    return out


def _checked(record: MemoRecord) -> MemoRecord:
    if not 1 <= record.schema_version <= SCHEMA_VERSION:
        raise ValueError(f"MemoRecord.schema_version must be in 1..{SCHEMA_VERSION}, "
                         f"got {record.schema_version}")
    return record


def _read_fd(fd: int) -> bytes:
    size, chunks, got = os.fstat(fd).st_size, [], 0
    while got < size:
        chunk = os.pread(fd, size - got, got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _write_frames(fd: int, frames: list[bytes]) -> None:
    """Append each frame with one write (looping only on a short write), fsync; undo on failure."""
    if not frames:
        return
    start = os.fstat(fd).st_size
    try:
        for frame in frames:
            view = memoryview(frame)
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


class MemoStore:
    """A memo store file at ``path`` (created, with its parent directories, on first write)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()

    def __repr__(self) -> str:
        return f"MemoStore({str(self.path)!r})"

    # -- reading ----------------------------------------------------------------------------------------

    def _read(self) -> bytes:
        """The whole file under a shared lock (so no half-written frame is seen); b"" if missing."""
        try:
            with self.path.open("rb") as f:
                fcntl.flock(f, fcntl.LOCK_SH)
                return f.read()
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise CacheError(f"{self.path}: cannot read memo store ({exc.strerror or exc})") from exc

    def load(self) -> Loaded:
        """Valid records in file order and the problems skipped; a missing file loads as empty."""
        return parse(self._read(), self.path)

    def verify(self) -> VerifyReport:
        """Check every frame (magic, length, crc, payload, schema version)."""
        loaded = self.load()
        return VerifyReport(len(loaded.records), loaded.problems)

    def stats(self) -> dict[str, object]:
        """Path, size in bytes, valid records, problems, records per fingerprint and per kind,
        header schema version."""
        data = self._read()
        loaded = parse(data, self.path)
        return {"path": str(self.path), "size_bytes": len(data), "records": len(loaded.records),
                "problems": len(loaded.problems),
                "fingerprints": dict(Counter(r.fingerprint for r in loaded.records)),
                "kinds": dict(Counter(record_kind(r) for r in loaded.records)),
                "schema_version": loaded.schema_version}

    # -- writing ----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """An exclusively locked O_APPEND descriptor of the live file, its header written or checked."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    if _same_file(fd, self.path):  # else removed or replaced while we waited: reopen
                        break
                except BaseException:
                    os.close(fd)
                    raise
                os.close(fd)
            try:
                size = os.fstat(fd).st_size
                if _header_version(os.pread(fd, _HEADER.size, 0), self.path) is None:
                    if size:
                        os.ftruncate(fd, 0)  # a torn header: nothing else can follow it
                    os.write(fd, _HEADER.pack(FILE_MAGIC, SCHEMA_VERSION))
                yield fd
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        except OSError as exc:
            raise CacheError(f"{self.path}: cannot write memo store ({exc.strerror or exc})") from exc

    def append(self, record: MemoRecord) -> None:
        """Append one record durably (fsync'ed); ``record.schema_version`` must be set."""
        self.append_many([record])

    def append_many(self, records: Iterable[MemoRecord]) -> int:
        """Append records in order under one lock and one fsync; returns how many."""
        frames = [encode_frame(_checked(r)) for r in records]
        if frames:
            with self._locked() as fd:
                _write_frames(fd, frames)
        return len(frames)

    def import_from(self, src: str | os.PathLike[str]) -> int:
        """Append the valid records of store ``src`` not already here (by record_id); returns how many."""
        if not Path(src).exists():
            raise CacheError(f"{src}: cannot import memo store: no such file")
        incoming = MemoStore(src).load().records
        with self._locked() as fd:
            have = {record_id(r) for r in parse(_read_fd(fd), self.path).records}
            new = []
            for record in incoming:
                rid = record_id(record)
                if rid not in have:
                    have.add(rid)
                    new.append(record)
            _write_frames(fd, [encode_frame(r) for r in new])
        return len(new)

    def export(self, dest: str | os.PathLike[str]) -> int:
        """Write the valid records, deduplicated by record_id, to a new store ``dest`` atomically.

        ``dest`` is locked while it is replaced, so it may be a live store (even this one: compaction).
        Returns the number of records written.
        """
        dest = Path(dest)
        data = self._read()  # before locking dest: never hold one store's lock while waiting for another
        with MemoStore(dest)._locked() as dfd:
            if _same_file(dfd, self.path):
                data = _read_fd(dfd)  # compaction in place: reread under the lock, losing no append
            seen: set[str] = set()
            frames = []
            for record in parse(data, self.path).records:
                rid = record_id(record)
                if rid not in seen:
                    seen.add(rid)
                    frames.append(encode_frame(record))
            tmp = dest.parent / f".{dest.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_HEADER.pack(FILE_MAGIC, SCHEMA_VERSION))
                    f.writelines(frames)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, dest)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            dir_fd = os.open(dest.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return len(frames)

    def clear(self) -> None:
        """Remove the store file (under the lock); nothing else. A missing file is fine."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise CacheError(f"{self.path}: cannot clear memo store ({exc.strerror or exc})") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            head = os.pread(fd, len(FILE_MAGIC), 0)
            if head != FILE_MAGIC[: len(head)]:
                raise CacheError(f"{self.path}: not a wormhole memo store; not removing it")
            if _same_file(fd, self.path):
                self.path.unlink()
        except OSError as exc:
            raise CacheError(f"{self.path}: cannot clear memo store ({exc.strerror or exc})") from exc
        finally:
            os.close(fd)
