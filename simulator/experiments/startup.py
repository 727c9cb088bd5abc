"""The start-up's cost as issue 27 states it: CPU seconds (user + system) of the main command, `python -m simulator
scenarios/pcie8_ngram.yaml`, over those of `python -c "import numpy"`, run in interleaved pairs on the same machine
(so the machine's load moves both alike), the median of the pairs' ratios. Bytecode is cached as Python does by
default (a first, unmeasured run writes it, whatever PYTHONDONTWRITEBYTECODE says): what a user's second run costs."""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys

MAIN_COMMAND = ("-m", "simulator", "scenarios/pcie8_ngram.yaml")
NUMPY_COMMAND = ("-c", "import numpy")


def child_cpu_s(args: tuple[str, ...], cwd: str) -> float:
    """CPU seconds a Python child running `args` took (its output discarded; a failure is an error)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, *args], cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def startup_pairs(pairs: int = 9, cwd: str | None = None) -> list[tuple[float, float]]:
    """(main command CPU s, numpy import CPU s) for each pair, the main command first."""
    root = cwd or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child_cpu_s(MAIN_COMMAND, root)  # writes the bytecode
    return [(child_cpu_s(MAIN_COMMAND, root), child_cpu_s(NUMPY_COMMAND, root)) for _ in range(pairs)]


def median_ratio(measured: list[tuple[float, float]]) -> float:
    return statistics.median(main / numpy for main, numpy in measured)
