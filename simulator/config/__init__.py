"""Configuration: YAML files -> validated, typed, frozen objects. Pure: no simulation, no side effects."""
from .loader import Scenario, build, load_scenario, parse_override
from .model_card import ModelCard
from .scenario import ScenarioSpec
from .topology import Topology

__all__ = ["Scenario", "ScenarioSpec", "Topology", "ModelCard", "build", "load_scenario", "parse_override"]
