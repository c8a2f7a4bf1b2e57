"""C++ extensions of stock ns-3.44, compiled against the `ns3` wheel's headers (see bridge.ns3.patches)."""

from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
