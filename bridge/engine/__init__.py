"""The run loop: workload executor (and, later, partitions, steady detection, fast-forward, memo)."""
