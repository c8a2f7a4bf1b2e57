"""Workloads: loose flow lists and LLM-training DAGs."""
