"""The package version: one definition, read by pyproject.toml (setuptools dynamic version) and every result."""
__version__ = "0.2.0"
