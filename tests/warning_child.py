"""A child that succeeds after printing a warning and other noise on stderr: for the runner's tests."""

import sys

from bridge.runner import child_main


def run(payload, progress):
    print("[cling] some noise", file=sys.stderr)
    print("wormhole: warning: something the user should know", file=sys.stderr)
    return {"ok": True}


if __name__ == "__main__":
    child_main(run)
