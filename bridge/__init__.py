"""Wormhole: accelerated packet-level simulation of LLM-training networks on stock ns-3."""

__version__ = "0.1.0"
