"""Reading a user's CSV file (arrival traces, acceptance traces): rows by header name, every failure one ConfigError.

Bytes that are not UTF-8, text that is not CSV and a header without the needed columns each name the file and
what is wrong; the caller checks the values of each row.
"""
from __future__ import annotations

import csv
from typing import Iterator

from .errors import ConfigError


def csv_rows(path: str, needed: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for every data row of the file; the header must name every column in `needed`."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in needed if c not in (reader.fieldnames or [])]
            if missing:
                found = ", ".join(reader.fieldnames or []) or "no header row"
                raise ConfigError(path, "header", "no column " + ", ".join(repr(c) for c in missing),
                                  f"a header naming {', '.join(needed)} (this file has: {found})")
            yield from enumerate(reader, start=2)
    except UnicodeDecodeError as exc:
        raise ConfigError(path, "<file>", f"not UTF-8 text (byte {exc.start})", "a UTF-8 CSV file") from None
    except csv.Error as exc:
        raise ConfigError(path, "<file>", f"not a CSV file: {exc}", "a CSV file with a header row") from None
