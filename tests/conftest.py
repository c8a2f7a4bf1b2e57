"""Shared test fixtures."""

import sys
from pathlib import Path

# FIXME: remove once pyproject.toml sets `pythonpath = ["."]` for pytest (no pyproject yet).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
