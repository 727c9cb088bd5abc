"""Accept lengths replayed from a CSV file (speculation.acceptance kind trace): one column of whole accept lengths,
bonus token included; every mistake in the file is one line naming the file, the line and what is allowed."""
from __future__ import annotations

import csv
import math
import os

from ..config.errors import ConfigError
from ..config.speculation import TraceAcceptance


def read_trace(config: TraceAcceptance, base_dir: str, scenario_file: str) -> list[int]:
    path = os.path.normpath(os.path.join(base_dir, config.file))
    key = "speculation.acceptance.file"
    if not os.path.isfile(path):
        raise ConfigError(scenario_file, key, f"trace file not found: {path}")
    lengths = []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames or config.column not in reader.fieldnames:
                raise ConfigError(path, "header", f"no column {config.column!r}",
                                  ", ".join(reader.fieldnames or []) or "a CSV header row")
            for line, row in enumerate(reader, start=2):
                text = (row.get(config.column) or "").strip()
                try:
                    value = float(text)
                except ValueError:
                    raise ConfigError(path, f"line {line}", f"{config.column}={text!r} is not a number",
                                      "an accept length >= 1 (bonus token included)") from None
                if not math.isfinite(value) or value != int(value) or value < 1:
                    raise ConfigError(path, f"line {line}", f"{config.column}={text!r} is not a whole accept "
                                      "length", "an integer >= 1 (bonus token included)")
                lengths.append(int(value))
    except UnicodeDecodeError as exc:
        raise ConfigError(path, "<file>", f"not UTF-8 text (byte {exc.start})", "a UTF-8 CSV file") from None
    except csv.Error as exc:
        raise ConfigError(path, "<file>", f"not a CSV file: {exc}", "a CSV file with a header row") from None
    if not lengths:
        raise ConfigError(path, "rows", "the trace has no rows", "at least one accept length")
    return lengths
