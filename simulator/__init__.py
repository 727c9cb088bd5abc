"""specsim: a discrete-event simulator of multi-GPU LLM inference with speculative decoding."""
from .results.run import run
from .config import Scenario, load_scenario
from .config.errors import ConfigError
from .results.summary import Result

__all__ = ["run", "load_scenario", "Scenario", "ConfigError", "Result"]
