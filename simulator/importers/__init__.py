"""Bring your own world: model cards from Hugging Face config.json, machines from nvidia-smi, scenarios from engine
launch commands. Each importer writes the configuration the simulator reads, every value with where it came from."""
