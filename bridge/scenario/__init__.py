"""Scenarios: YAML files -> frozen, validated `Scenario` objects, or one-line `ScenarioError`s.

`load_scenario(path)` is the entry point; `parse_scenario_dict(data, path)` does the same for YAML
already parsed (tests, sweeps). The schema is in `schema.py`, the checks across fields in `load.py`.
"""

from bridge.scenario.load import load_scenario, parse_scenario_dict, with_accel_overrides
from bridge.scenario.schema import (
    MAX_SEED,
    AccelSpec,
    FatTreeSpec,
    FlowSpec,
    HpccTopologySpec,
    LeafSpineSpec,
    LinkSpec,
    RoftSpec,
    Scenario,
    TopologySpec,
    TransportSpec,
)

__all__ = [
    "MAX_SEED",
    "AccelSpec",
    "FatTreeSpec",
    "FlowSpec",
    "HpccTopologySpec",
    "LeafSpineSpec",
    "LinkSpec",
    "RoftSpec",
    "Scenario",
    "TopologySpec",
    "TransportSpec",
    "load_scenario",
    "parse_scenario_dict",
    "with_accel_overrides",
]
