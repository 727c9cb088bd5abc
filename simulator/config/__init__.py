"""Configuration: YAML files -> validated, typed, frozen objects. Pure: no simulation, no side effects.

The names below are imported on first use (PEP 562): `specsim --help` needs only the errors and the version.
"""
__all__ = ["Scenario", "ScenarioSpec", "Topology", "ModelCard", "build", "load_scenario", "parse_override"]

_WHERE = {"Scenario": ".loader", "build": ".loader", "load_scenario": ".loader", "parse_override": ".loader",
          "ModelCard": ".model_card", "ScenarioSpec": ".scenario", "Topology": ".topology"}


def __getattr__(name: str):
    if name in _WHERE:
        import importlib

        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'simulator.config' has no attribute {name!r}")
