"""The sweep's results file: one checked CSV row per point of this sweep, one sweep at a time, repaired on start.

- Rows: `point_id, point, base_id, axes..., metrics..., status, error, check`. `check` is the CRC-32 of the row's
  bytes before it, so a row cut short, edited or overwritten by stray bytes is recognised, even one that parses.
- Appends: each row is one os.write on an O_APPEND descriptor, written by the sweep's parent process only, so a
  kill leaves whole rows and at most one cut line at the end.
- Locks, for the whole sweep: an exclusive flock on `OUT.lock` beside the file's real path (symlinks and relative
  spellings resolved; the lock file stays: removing it would race) and one on the results file itself (a hard
  link is another name of it). A second sweep on the same file is refused at once with the first one's process id.
- Repair on open: a line that fails to decode, parse or check, a second row for a point, an error row (its point
  is retried) and a row of another configuration (its base_id or fidelity differ) are moved to `OUT.rejected` with
  a note saying why; CRLF line endings become LF. On completion, rows of points the sweep no longer has (an axis
  changed) are moved there too, and the rest are put in point order. Rewrites are atomic and go through a symlink
  to its target. Every point therefore ends with exactly one row, and nothing a user might want is thrown away.
A file whose first line is not this sweep's header is never rewritten: that is another sweep's file (or no results
file at all), and the sweep refuses it.
"""
from __future__ import annotations

import fcntl
import os
import time
from typing import Any, Callable

from ..config.errors import ConfigError
from ..results.files import atomic_write
from .rows import CHECK, line, parse, plain

class Store:
    """An open results file: locked, repaired, ready for appends. Use as a context manager.

    `identity`: column -> this sweep's value (its base_id, its fidelity); an ok row with another value is not a
    point of this sweep and is set aside on opening. `older`: headers of earlier versions of this sweep's file
    (their rows are all set aside and the file takes the current header).
    """

    def __init__(self, path: str, header: list[str], identity: dict[str, str] | None = None,
                 older: tuple[list[str], ...] = ()):
        self.path = path
        self.real = os.path.realpath(path)  # every spelling of one file: symlinks, relative paths
        self.header = [*header, CHECK]
        self.identity = identity or {}
        self.older = tuple(plain([*h, CHECK]) for h in older)
        self.rejected_path = self.real + ".rejected"
        self.held: list[int] = []  # descriptors holding our flocks: the lock file, each inode the file has had
        self.fd = -1
        try:
            self.held.append(_lock(self.real + ".lock", path))
            self._hold_file()
            self.done, self.num_rejected = self._repair()
            self.fd = os.open(self.real, os.O_WRONLY | os.O_APPEND)
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
        return tuple(fd for fd in (*self.held, self.fd) if fd >= 0)

    def append(self, cells: list[Any]) -> None:
        data = line(cells)
        if os.write(self.fd, data) != len(data):  # one write per row: O_APPEND keeps rows whole
            raise OSError(f"short write to the results file {self.path} ({len(data)} bytes)")
        if time.monotonic() - self._synced_at > 5.0:  # rows reach the disk at least every few seconds
            self.sync()

    def sync(self) -> None:
        os.fsync(self.fd)
        self._synced_at = time.monotonic()

    def finish(self, index: dict[str, int], stale: set[str]) -> None:
        """The sweep is complete: rewrite the file with its rows in point order (column `point`; `index` gives the
        current place of points found in the file), the rows of the `stale` ids set aside: not points of this sweep.
        """
        self.sync()
        with open(self.real, "rb") as handle:
            lines = handle.read().split(b"\n")
        width, kept, aside = len(self.header), [], []
        for number, raw in enumerate(lines[1:], start=2):
            if not raw:
                continue
            cells = parse(raw, width)
            if cells[0] in stale:
                aside.append((number, "not a point of this sweep (an axis or its values changed)", raw))
                continue
            place = index.get(cells[0])
            if place is not None and cells[1] != str(place):  # the point moved: an axis gained or lost a value
                cells[1] = str(place)
                raw = line(cells).rstrip(b"\n")
            kept.append((int(cells[1]), raw))
        kept.sort(key=lambda item: item[0])
        if aside:
            self._set_aside(aside)
            self.num_rejected += len(aside)
        self._rewrite(b"\n".join([lines[0], *(raw for _, raw in kept)]) + b"\n")

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.fsync(self.fd)
            finally:
                os.close(self.fd)
                self.fd = -1
        while self.held:
            os.close(self.held.pop())  # releases the flock

    def _hold_file(self) -> None:
        """flock the results file itself (made if missing): a sweep through another name of it (a hard link) is
        refused too. Taken again on each new inode a rewrite makes; the old ones stay held until the end."""
        fd = os.open(self.real, os.O_RDONLY | os.O_CREAT, 0o644)
        self.held.append(_exclusive(fd, self.path, _flock_holder, " under another name"))

    def _rewrite(self, data: bytes) -> None:
        """Replace the file's content atomically (through a symlink, never replacing it) and keep it locked."""
        with atomic_write(self.real, "wb") as handle:
            handle.write(data)
        self._hold_file()
        if self.fd >= 0:  # appends go to the new file
            os.close(self.fd)
            self.fd = os.open(self.real, os.O_WRONLY | os.O_APPEND)

    def _repair(self) -> tuple[set[str], int]:
        """Read the file; set bad, duplicate, error and other sweeps' rows aside; rewrite it if anything changed.
        Returns the ids of the points with an ok row and how many lines were set aside."""
        with open(self.real, "rb") as handle:
            data = handle.read()
        header = plain(self.header)
        if not data:
            self._rewrite(header + b"\n")
            return set(), 0
        lines = data.split(b"\n")
        crlf = lines[0] == header + b"\r"  # saved by an editor or a spreadsheet with CRLF line endings
        if crlf:
            lines = [raw[:-1] if raw.endswith(b"\r") else raw for raw in lines]
        older = lines[0] in self.older
        if lines[0] != header and not older:
            raise ConfigError(self.path, "<header>", "the results file has other columns (another sweep's?)",
                              "the same axes and metrics, or another --out")
        kept, done, aside = [header], set(), []
        status = self.header.index("status")
        checks = [(self.header.index(column), column, value) for column, value in self.identity.items()]
        for number, raw in enumerate(lines[1:], start=2):
            if number == len(lines) and not raw:  # the empty piece after the final newline
                continue
            reason = None
            try:
                cells = [] if older else parse(raw, len(self.header))
            except ValueError as exc:
                reason = "no newline at the end: cut short" if number == len(lines) else str(exc)
            else:
                reason = "written by an earlier specsim, whose point ids did not hash the files' content" \
                    if older else _misfit(cells, cells[status], done, checks)
            if reason is None:
                kept.append(raw)
                done.add(cells[0])
            else:
                aside.append((number, reason, raw))
        if aside:
            self._set_aside(aside)
        if aside or crlf or older:
            self._rewrite(b"\n".join(kept) + b"\n")
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


def _misfit(cells: list[str], status: str, done: set[str], checks: list[tuple[int, str, str]]) -> str | None:
    """Why a parsed row cannot stand for its point in this sweep, or None."""
    if status != "ok":
        return f"{status} row: its point is run again"
    if cells[0] in done:
        return f"a second row for point {cells[0]}"
    for column, name, value in checks:
        if cells[column] != value:
            return (f"not a point of this sweep: its {name} is {cells[column] or '(none)'}, this sweep's is {value} "
                    "(the base scenario, a file it reads, the sweep's set or the fidelity changed): run again")
    return None


def _lock(lock_path: str, shown: str) -> int:
    """Hold an exclusive lock on OUT.lock (beside the file's real path), or refuse naming the sweep that holds it."""
    fd = _exclusive(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644), shown,
                    lambda fd: os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _exclusive(fd: int, shown: str, holder: Callable[[int], str], how: str = "") -> int:
    """`fd` with an exclusive flock on its file, or closed and a refusal naming the process `holder` finds."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = holder(fd)
        os.close(fd)
        raise ConfigError("--out", shown, f"another sweep (process {pid}) is writing this results file{how}",
                          "wait for it to finish, or give another --out") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _flock_holder(fd: int) -> str:
    """The process holding a flock on the file of `fd`, from /proc/locks (Linux); '?' elsewhere."""
    inode = f":{os.fstat(fd).st_ino}"
    try:
        with open("/proc/locks") as handle:
            for entry in handle:
                fields = entry.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].endswith(inode):
                    return fields[4]
    except OSError:
        pass
    return "?"
