"""Accept lengths replayed from a CSV file (speculation.acceptance kind trace): one column of whole accept lengths,
bonus token included; every mistake in the file is one line naming the file, the line and what is allowed."""
from __future__ import annotations

import math
import os

from ..config.csv_rows import csv_rows
from ..config.errors import ConfigError
from ..config.mirror import TraceAcceptance


def read_trace(config: TraceAcceptance, base_dir: str, scenario_file: str) -> list[int]:
    path = os.path.normpath(os.path.join(base_dir, config.file))
    key = "speculation.acceptance.file"
    if not os.path.isfile(path):
        raise ConfigError(scenario_file, key, f"trace file not found: {path}")
    lengths = []
    for line, row in csv_rows(path, (config.column,)):
        text = (row.get(config.column) or "").strip()
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(path, f"line {line}", f"{config.column}={text!r} is not a number",
                              "an accept length >= 1 (bonus token included)") from None
        if not math.isfinite(value) or value != int(value) or value < 1:
            raise ConfigError(path, f"line {line}", f"{config.column}={text!r} is not a whole accept length",
                              "an integer >= 1 (bonus token included)")
        lengths.append(int(value))
    if not lengths:
        raise ConfigError(path, "rows", "the trace has no rows", "at least one accept length")
    return lengths
