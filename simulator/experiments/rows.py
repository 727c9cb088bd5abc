"""One row of a sweep's results file: CSV cells (floats round-trip, structures as JSON) with the CRC-32 of its bytes
appended as `check`, so a row cut short or edited is recognised; and the valid rows of a file read back."""
from __future__ import annotations

import csv
import io
import json
import math
import zlib
from typing import Any

import numpy as np

CHECK = "check"


def cell(value: Any) -> str:
    """A value as CSV text: floats round-trip (repr), structures as JSON; never a raw newline."""
    if value is None:
        return ""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""  # no NaN or inf in a results file
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and "\n" not in value and "\r" not in value:
        return value
    return json.dumps(value, separators=(",", ":"), default=str)


def plain(cells: list[str]) -> bytes:
    """The cells as one CSV line: no check, no newline."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(cells)
    return buffer.getvalue().encode()


def checksum(body: bytes) -> str:
    return f"{zlib.crc32(body):08x}"


def line(cells: list[Any]) -> bytes:
    """One row, its check appended: CSV text, one line, ending in a newline."""
    body = plain([cell(c) for c in cells])
    return body + b"," + checksum(body).encode() + b"\n"


def parse(raw: bytes, width: int) -> list[str]:
    """The cells of one line (no newline) without its check; ValueError says why it is not a valid row."""
    body, sep, check = raw.rpartition(b",")
    if not sep or check.decode("ascii", "replace") != checksum(body):
        raise ValueError("its check does not match its contents (damaged or cut short)")
    text = body.decode("utf-8")  # a bad byte raises UnicodeDecodeError, a ValueError
    rows = list(csv.reader([text], strict=True))
    if len(rows) != 1 or len(rows[0]) + 1 != width:
        raise ValueError(f"{len(rows[0]) + 1 if rows else 0} fields, the header has {width}")
    return rows[0]


def read_results(path: str) -> list[dict[str, str]]:
    """The valid rows of a results file as dicts (the header's names; damaged lines left out)."""
    with open(path, "rb") as handle:
        data = handle.read()
    lines = data.split(b"\n")
    if lines[0].endswith(b"\r"):  # saved with CRLF line endings
        lines = [raw[:-1] if raw.endswith(b"\r") else raw for raw in lines]
    header = next(csv.reader([lines[0].decode("utf-8", "replace")]))
    rows = []
    for raw in lines[1:-1]:  # the last element follows the last newline: empty, or a cut line
        try:
            cells = parse(raw, len(header))
        except ValueError:
            continue
        rows.append(dict(zip(header, cells + [raw.rpartition(b",")[2].decode()])))
    return rows
