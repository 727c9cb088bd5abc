"""The sweep's results file: one CSV row per point, each appended with a single os.write on an O_APPEND descriptor,
so a killed sweep leaves only whole rows; a trailing partial line is cut when the file is opened again.
"""
from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

import numpy as np

from ..config.errors import ConfigError


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return repr(value) if isinstance(value, float) else str(value)
    return json.dumps(value, separators=(",", ":"), default=str)


def line(cells: list[Any]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([cell(c) for c in cells])
    return buffer.getvalue().encode()


def read_results(path: str) -> list[dict[str, str]]:
    """The whole rows of a results file (a trailing partial line is left out)."""
    with open(path, "rb") as handle:
        data = handle.read()
    data = data[: data.rfind(b"\n") + 1]
    return list(csv.DictReader(io.StringIO(data.decode())))


def open_store(path: str, header: list[str]) -> tuple[int, set[str]]:
    """Open the results file for appending: cut a partial last line, check or write the header, and return the
    descriptor and the ids of the points that already have an ok row."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if data and not data.endswith(b"\n"):  # a row cut by a kill: not a result
            data = data[: data.rfind(b"\n") + 1]
            os.ftruncate(fd, len(data))
        if not data:
            write(fd, line(header))
            return fd, set()
        rows = list(csv.reader(io.StringIO(data.decode())))
        if rows[0] != header:
            raise ConfigError(path, "<header>", "the results file has other columns (another sweep's?)",
                              "the same axes and metrics, or another --out")
        status = header.index("status")
        return fd, {r[0] for r in rows[1:] if len(r) == len(header) and r[status] == "ok"}
    except BaseException:
        os.close(fd)
        raise


def write(fd: int, line: bytes) -> None:
    if os.write(fd, line) != len(line):  # one write per row: O_APPEND keeps rows whole and in one piece
        raise OSError(f"short write to the results file ({len(line)} bytes)")
