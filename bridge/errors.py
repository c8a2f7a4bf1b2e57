"""User-facing errors. Each renders as one line naming the file and field at fault."""

from __future__ import annotations


class WormholeError(Exception):
    """An error the CLI prints as one line (no traceback)."""


class ScenarioError(WormholeError):
    """A scenario (or an imported input file) is malformed or impossible."""

    def __init__(self, path: str | None, field: str | None, message: str):
        self.path, self.field, self.message = path, field, message
        where = ": ".join(p for p in (str(path) if path else None, field) if p)
        super().__init__(f"{where}: {message}" if where else message)


class CacheFileError(WormholeError):
    """A memo store file cannot be used (not a store, newer schema, unreadable)."""


class SimulationError(WormholeError):
    """The ns-3 child process failed (abort, crash, timeout)."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a run; what it had finished is in `out_dir` (stop_reason
    "interrupted" in its summary.json), or nothing if it was stopped before it could write."""

    def __init__(self, out_dir=None):
        super().__init__()
        self.out_dir = out_dir
