"""Configuration: YAML files -> validated, typed, frozen objects. Pure: no simulation, no side effects.

The names below are imported on first use (PEP 562): `specsim --help` needs only the errors and the version.
"""
from .lazy import lazy_names

__all__ = ["Scenario", "ScenarioSpec", "Topology", "ModelCard", "build", "load_scenario", "parse_override"]

__getattr__ = lazy_names(__name__, {"Scenario": ".loader", "build": ".loader", "load_scenario": ".loader",
                                    "parse_override": ".yaml_files", "ModelCard": ".model_card",
                                    "ScenarioSpec": ".scenario", "Topology": ".topology"}, globals())
