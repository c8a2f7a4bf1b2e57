"""What the benchmarks that compare two versions of the code share: where a scenario named on the
command line is, and a checkout of another commit beside this one (a git worktree)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def scenario_path(name: str) -> Path:
    """A path as given, else scenarios/<name>.yaml."""
    path = Path(name)
    return path if path.exists() else ROOT / "scenarios" / f"{name}.yaml"


def checkout(ref: str, where: Path) -> Path:
    """Commit `ref` checked out (detached) at `where`, replacing what was there."""
    if where.exists():
        shutil.rmtree(where)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=True)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(where), ref],
                   check=True, capture_output=True)
    return where


def code_roots(base: str | None, out: Path) -> dict[str, Path]:
    """The code to measure, by name: this checkout ("this"), after commit `base` checked out into
    out/base ("base") if one is given."""
    return {"this": ROOT} if base is None else {"base": checkout(base, out / "base"), "this": ROOT}
