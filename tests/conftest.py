"""Every test gets its own empty memo store: runs never read or write the user's ~/.cache."""

from __future__ import annotations

import os
import tempfile

import pytest


def pytest_configure(config):
    # For fixtures of wider scope than a test (set up before the per-test store below).
    os.environ["WORMHOLE_CACHE"] = os.path.join(tempfile.mkdtemp(prefix="wormhole-test-memo-"), "memo.whdb")


@pytest.fixture(autouse=True)
def private_memo_store(tmp_path_factory, monkeypatch):
    path = tmp_path_factory.mktemp("memo") / "memo.whdb"
    monkeypatch.setenv("WORMHOLE_CACHE", str(path))
    return path
