"""specsim: a discrete-event simulator of multi-GPU LLM inference with speculative decoding.

The public names are imported on first use (PEP 562), so `python -m simulator COMMAND` loads only what that command
needs, and `import simulator` costs almost nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .config.version import __version__

__all__ = ["run", "load_scenario", "Scenario", "ConfigError", "Result", "__version__"]
_WHERE = {"run": ".api.run", "load_scenario": ".config", "Scenario": ".config", "ConfigError": ".config.errors",
          "Result": ".results.summary"}

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .config import Scenario, load_scenario
    from .config.errors import ConfigError
    from .api.run import run
    from .results.summary import Result


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
