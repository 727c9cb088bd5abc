"""specsim: a discrete-event simulator of multi-GPU LLM inference with speculative decoding."""
from .api import run
from .config import Scenario, load_scenario
from .errors import ConfigError
from .metrics import Result

__all__ = ["run", "load_scenario", "Scenario", "ConfigError", "Result"]
