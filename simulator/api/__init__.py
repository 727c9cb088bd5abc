"""The Python API above the serving layer: simulator.run(scenario) -> Result and its figure table (api.run)."""
