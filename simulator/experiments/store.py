"""The sweep's results file: one checked CSV row per point, one sweep at a time, repaired on every start.

- Rows: `point_id, axes..., metrics..., status, error, check`. `check` is the CRC-32 of the row's bytes before it,
  so a row cut short, edited or overwritten by stray bytes is recognised, even one that still parses as CSV.
- Appends: each row is one os.write on an O_APPEND descriptor, written by the sweep's parent process only, so a
  kill leaves whole rows and at most one cut line at the end.
- Lock: an exclusive flock on `OUT.lock` (a file that stays; removing it would race) for the whole sweep. A second
  sweep on the same results file is refused at once with the first one's process id.
- Repair on open: a line that fails to decode, parse or check, a second row for a point, and an error row (its point
  is retried) are moved to `OUT.rejected` with a note saying why, and the file is rewritten atomically with the
  rows kept. Every point therefore ends with exactly one row, and nothing a user might want is thrown away.
A file whose first line is not this sweep's header is never rewritten: that is another sweep's file (or no results
file at all), and the sweep refuses it.
"""
from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import os
import time
import zlib
from typing import Any

import numpy as np

from ..config.errors import ConfigError
from ..results.files import atomic_write

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


def _plain(cells: list[str]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(cells)
    return buffer.getvalue().encode()


def checksum(body: bytes) -> str:
    return f"{zlib.crc32(body):08x}"


def line(cells: list[Any]) -> bytes:
    """One row, its check appended: CSV text, one line, ending in a newline."""
    body = _plain([cell(c) for c in cells])
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
    header = next(csv.reader([lines[0].decode("utf-8", "replace")]))
    rows = []
    for raw in lines[1:-1]:  # the last element follows the last newline: empty, or a cut line
        try:
            cells = parse(raw, len(header))
        except ValueError:
            continue
        rows.append(dict(zip(header, cells + [raw.rpartition(b",")[2].decode()])))
    return rows


class Store:
    """An open results file: locked, repaired, ready for appends. Use as a context manager."""

    def __init__(self, path: str, header: list[str]):
        self.path = path
        self.header = [*header, CHECK]
        self.rejected_path = path + ".rejected"
        self.lock_fd = _lock(path)
        self.fd = -1
        try:
            self.done, self.num_rejected = self._repair()
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            self.close()
            raise
        self._synced_at = time.monotonic()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def fds(self) -> tuple[int, ...]:
        """Descriptors a forked worker must close (it must not hold the lock or write rows)."""
        return tuple(fd for fd in (self.lock_fd, self.fd) if fd >= 0)

    def append(self, cells: list[Any]) -> None:
        data = line(cells)
        if os.write(self.fd, data) != len(data):  # one write per row: O_APPEND keeps rows whole
            raise OSError(f"short write to the results file {self.path} ({len(data)} bytes)")
        if time.monotonic() - self._synced_at > 5.0:  # rows reach the disk at least every few seconds
            self.sync()

    def sync(self) -> None:
        os.fsync(self.fd)
        self._synced_at = time.monotonic()

    def reorder(self, order: dict[str, int]) -> None:
        """Rewrite the file (atomically) with its rows sorted by `order` of their point ids (unknown ids last)."""
        self.sync()
        with open(self.path, "rb") as handle:
            lines = handle.read().split(b"\n")
        header, rows = lines[0], [raw for raw in lines[1:] if raw]
        width = len(self.header)
        rows.sort(key=lambda raw: order.get(parse(raw, width)[0], len(order)))
        with atomic_write(self.path, "wb") as handle:
            handle.write(b"\n".join([header, *rows]) + b"\n")

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.fsync(self.fd)
            finally:
                os.close(self.fd)
                self.fd = -1
        if self.lock_fd >= 0:
            os.close(self.lock_fd)  # releases the flock
            self.lock_fd = -1

    def _repair(self) -> tuple[set[str], int]:
        """Read the file; set bad, duplicate and error rows aside; rewrite it if anything was set aside.
        Returns the ids of the points with an ok row and how many lines were set aside."""
        try:
            with open(self.path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            data = b""
        header = _plain(self.header)
        if not data:
            with atomic_write(self.path, "wb") as handle:
                handle.write(header + b"\n")
            return set(), 0
        lines = data.split(b"\n")
        if lines[0] != header:
            raise ConfigError(self.path, "<header>", "the results file has other columns (another sweep's?)",
                              "the same axes and metrics, or another --out")
        kept, done, aside = [lines[0]], set(), []
        status = self.header.index("status")
        for number, raw in enumerate(lines[1:], start=2):
            if number == len(lines) and not raw:  # the empty piece after the final newline
                continue
            reason = None
            try:
                cells = parse(raw, len(self.header))
            except ValueError as exc:
                reason = "no newline at the end: cut short" if number == len(lines) else str(exc)
            else:
                if cells[status] != "ok":
                    reason = f"{cells[status]} row: its point is run again"
                elif cells[0] in done:
                    reason = f"a second row for point {cells[0]}"
            if reason is None:
                kept.append(raw)
                done.add(cells[0])
            else:
                aside.append((number, reason, raw))
        if aside:
            self._set_aside(aside)
            with atomic_write(self.path, "wb") as handle:
                handle.write(b"\n".join(kept) + b"\n")
        return done, len(aside)

    def _set_aside(self, aside: list[tuple[int, str, bytes]]) -> None:
        """Append the lines to OUT.rejected, each after a note: '# <time> line N: why'."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        out = b"".join(f"# {stamp} line {n}: {why}\n".encode() + raw + b"\n" for n, why, raw in aside)
        fd = os.open(self.rejected_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, out)
            os.fsync(fd)
        finally:
            os.close(fd)


def _lock(path: str) -> int:
    """Hold an exclusive lock on OUT.lock, or refuse naming the sweep that holds it."""
    lock_path = path + ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise ConfigError("--out", path, f"another sweep (process {holder}) is writing this results file",
                          "wait for it to finish, or give another --out") from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
