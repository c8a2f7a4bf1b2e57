"""Run each simulation in a child process.

ns-3 asserts call abort(), which no Python code can catch; in a child, an abort becomes a clear
`SimulationError` here. The child writes into a private folder inside the output folder; its
files replace the old ones only when it succeeded, so a failed run never damages earlier results.
The child reports progress and its summary as JSON lines on stdout, prefixed with `@wormhole `.
A first Ctrl-C asks the child to stop (SIGINT): it ends its run where it is and writes what
finished, which is kept; a second one kills it. A time limit is the child's own: at it, the run
ends where it is and keeps what finished (stop_reason "time limit reached"); a child still running
TIME_LIMIT_GRACE_S later (stuck inside one ns-3 call) is killed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from .errors import RunInterrupted, SimulationError, WormholeError

PREFIX = "@wormhole "
ProgressFn = Callable[[dict], None]
_STOP = threading.Event()   # in a child: SIGINT asked it to stop where it is
TIME_LIMIT_REACHED = "time limit reached"
TIME_LIMIT_GRACE_S = 10.0   # after the time limit, before a child that has not stopped is killed

# What ns-3 and the C++ runtime print when they abort, most telling first.
_ABORT_PATTERNS = [r"NS_ASSERT failed.*", r"msg=.*", r"NS_FATAL.*", r"what\(\):.*", r"terminate called.*",
                   r"Segmentation fault.*"]


def _abort_message(stderr: str) -> str:
    for pattern in _ABORT_PATTERNS:
        match = re.search(pattern, stderr)
        if match:
            return " ".join(match.group(0).split())[:300]
    lines = [ln for ln in stderr.splitlines() if ln.strip() and "materialize symbols" not in ln]
    return lines[-1].strip()[:300] if lines else "no message"


def make_out_dir(path: str | os.PathLike) -> Path:
    """Create the output folder `path` (and its parents) if needed; one that cannot be created (a
    file in its place, no permission) is a WormholeError naming it, before any run starts."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        reason = "a file is in its place" if isinstance(e, FileExistsError) else e.strerror
        raise WormholeError(f"{path}: cannot create the output folder ({reason})") from None
    return path


def run_child(module: str, payload: dict, out_dir: Path, progress: ProgressFn | None = None,
              timeout_s: float | None = None) -> dict:
    """Run `python -m module <payload json>` with a private output folder inside out_dir.

    Returns the child's final `result` message; its files are then moved into out_dir. With
    `timeout_s` the child gets payload["time_limit_s"] (see time_limit_reached).
    """
    out_dir = make_out_dir(Path(out_dir).resolve())  # the child runs in its own folder: relative paths would move
    work = Path(tempfile.mkdtemp(prefix=".partial-", dir=out_dir))
    payload = {**payload, "out": str(work), "time_limit_s": timeout_s}
    stderr_path = work / ".stderr"
    result: dict | None = None
    error: str | None = None
    interrupted = False
    try:
        with open(stderr_path, "w+") as stderr:
            proc = subprocess.Popen([sys.executable, "-m", module, json.dumps(payload)],
                                    stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=work,
                                    start_new_session=True)
            timer = None
            if timeout_s:
                timer = threading.Timer(timeout_s + TIME_LIMIT_GRACE_S, lambda: os.killpg(proc.pid, signal.SIGKILL))
                timer.start()
            while True:
                try:
                    for line in proc.stdout:
                        if not line.startswith(PREFIX):
                            continue
                        message = json.loads(line[len(PREFIX):])
                        if "progress" in message and progress is not None:
                            progress(message["progress"])
                        result = message.get("result", result)
                        error = message.get("error", error)
                    break
                except KeyboardInterrupt:
                    if interrupted:        # the second Ctrl-C: no waiting for the child
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                        raise RunInterrupted() from None
                    interrupted = True     # the first: the child stops and writes what finished
                    os.kill(proc.pid, signal.SIGINT)
            rc = proc.wait()
            if timer is not None:
                timer.cancel()
            stderr.seek(0)
            stderr_text = stderr.read()
        if error is not None:
            raise WormholeError(error)
        if interrupted and (rc != 0 or result is None):
            raise RunInterrupted()  # stopped before it could write anything
        if rc != 0 or result is None:
            if rc == -signal.SIGKILL and timeout_s:
                raise SimulationError(f"simulation exceeded the {timeout_s:g} s time limit and did not stop "
                                      f"within {TIME_LIMIT_GRACE_S:g} s: it was killed, nothing kept")
            how = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
            raise SimulationError(f"ns-3 child process failed ({how}): {_abort_message(stderr_text)}")
        for line in stderr_text.splitlines():    # (else a successful child's stderr is dropped)
            if line.startswith("wormhole: warning:"):
                print(line, file=sys.stderr)
        # summary.json last: its presence means the whole run is in place (sweeps resume on it).
        for item in sorted(work.iterdir(), key=lambda p: p.name == "summary.json"):
            if not item.name.startswith("."):
                os.replace(item, out_dir / item.name)
        if interrupted:
            raise RunInterrupted(out_dir)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def stop_requested() -> str | None:
    """In a child: "interrupted" if the parent asked it to stop where it is (a Ctrl-C), else None."""
    return "interrupted" if _STOP.is_set() else None


def time_limit_reached(payload: dict) -> Callable[[], str | None]:
    """In a child: stop_requested, and TIME_LIMIT_REACHED once payload["time_limit_s"] seconds
    have passed since this call (the child's start)."""
    limit = payload.get("time_limit_s")
    if limit is None:
        return stop_requested
    deadline = time.monotonic() + limit
    return lambda: stop_requested() or (TIME_LIMIT_REACHED if time.monotonic() >= deadline else None)


def child_main(run: Callable[[dict, ProgressFn], dict]) -> None:
    """Entry point of a child: parse the payload, run, report; WormholeErrors become messages."""
    def send(message: dict) -> None:
        sys.stdout.write(PREFIX + json.dumps(message) + "\n")
        sys.stdout.flush()

    payload = json.loads(sys.argv[1])
    signal.signal(signal.SIGINT, lambda signum, frame: _STOP.set())
    try:
        result = run(payload, lambda p: send({"progress": p}))
    except WormholeError as exc:
        send({"error": str(exc)})
        sys.exit(2)
    send({"result": result})
