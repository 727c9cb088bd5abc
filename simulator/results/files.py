"""Output files: checked before any simulation starts, written atomically.

Every output is written to a temporary file in the destination's own folder, flushed to disk (fsync) and renamed
over the destination (os.replace, atomic on POSIX within one file system). A write that fails half-way (a full
disk, a kill) leaves the previous file untouched; a temporary file left by a kill -9 (its name holds its writer's
pid) is removed by the next write to the same output. The checks run before the simulation, so a mistyped path
costs one line and exit 2, not a simulation thrown away.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from typing import IO, Iterator

from ..config.errors import ConfigError

FILE_OPTIONS = ("steps_log", "trace", "plot")  # argparse dests of single-file outputs, shared by the commands
PLOT_SUFFIXES = (".png", ".svg")  # what viz.style writes: SVG for .svg, PNG otherwise


class OutputError(OSError):
    """Writing an output failed (a full disk, a quota): the previous file at `filename` is as it was."""


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_output_file(path: str | None, flag: str) -> None:
    """A file output: a non-empty path, not a directory or special file, in an existing writable folder."""
    if path is None:
        return
    if not path.strip():
        raise ConfigError("command line", flag, "an empty path", "a file path such as out.json")
    if path.endswith((os.sep, os.altsep or os.sep)):
        raise ConfigError("command line", flag, f"{path} ends in a separator (a folder)", "a file path such as out.json")
    if os.path.isdir(path):
        raise ConfigError("command line", flag, f"{path} is a directory", "a file path inside it")
    if os.path.lexists(path):
        mode = os.stat(path).st_mode if os.path.exists(path) else 0
        if not stat.S_ISREG(mode):
            raise ConfigError("command line", flag, f"{path} exists and is not a regular file", "a regular file path")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ConfigError("command line", flag, f"the folder {folder} {what}", "a path in an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError("command line", flag, f"the folder {folder} is not writable", "a writable folder")


def check_output_folder(path: str | None, flag: str, create: bool = True) -> None:
    """A folder output: made (with its parents) when `create`, else it must exist; it must be writable."""
    if path is None:
        return
    if not path.strip():
        raise ConfigError("command line", flag, "an empty path", "a folder path")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError("command line", flag, f"{path} exists and is not a folder", "a folder path")
    if not os.path.isdir(path):
        if not create:
            raise ConfigError("command line", flag, f"the folder {path} does not exist", "an existing folder")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise ConfigError("command line", flag, f"cannot create the folder {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError("command line", flag, f"the folder {path} is not writable", "a writable folder")


def check_outputs(args, files: tuple[str, ...] = FILE_OPTIONS, folders: tuple[str, ...] = ()) -> None:
    """Check a command's output options (argparse dests) before it simulates anything: each path, a plot's
    extension, and that no two outputs name one file (by real path: a symlink or ./x names x)."""
    named: dict[str, str] = {}
    for dest in files:
        path = getattr(args, dest, None)
        check_output_file(path, _flag(dest))
        if path is None:
            continue
        if dest == "plot" and not path.lower().endswith(PLOT_SUFFIXES):
            raise ConfigError("command line", "--plot", f"{path}: unsupported figure format "
                              f"{os.path.splitext(path)[1] or '(no extension)'}", " or ".join(PLOT_SUFFIXES))
        real = os.path.realpath(path)
        if real in named:
            raise ConfigError("command line", f"{named[real]} and {_flag(dest)}", f"both name the file {path}",
                              "a different file for each output")
        named[real] = _flag(dest)
    for dest in folders:
        check_output_folder(getattr(args, dest, None), _flag(dest))


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", encoding: str | None = "utf-8", newline: str | None = None
                 ) -> Iterator[IO]:
    """Open a temporary file next to `path`; on a clean exit flush, fsync and rename it over `path`.

    On any exception the temporary file is removed and `path` is left as it was; an OSError (a full disk) is
    raised again naming `path`, the file the user asked for, not the temporary one.
    """
    folder = os.path.dirname(os.path.abspath(path))
    prefix = f".{os.path.basename(path)}."
    remove_stale_temps(folder, prefix)
    fd, temp = tempfile.mkstemp(dir=folder, prefix=f"{prefix}{os.getpid()}.", suffix=".tmp")
    try:
        binary = "b" in mode
        with os.fdopen(fd, mode, encoding=None if binary else encoding,
                       newline=None if binary else newline) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, _mode_for(path))
        os.replace(temp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename != path:
            raise OutputError(exc.errno, exc.strerror, path) from exc
        raise
    _sync_folder(folder)


def remove_stale_temps(folder: str, prefix: str) -> None:
    """Remove the temporary files `prefix<pid>.<random>.tmp` in `folder` whose writer is gone (a kill -9 during a
    write leaves one): a live writer's file is its own."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].split(".", 1)[0] if name.startswith(prefix) and name.endswith(".tmp") else ""
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def write_bytes(path: str, data: bytes) -> str:
    """Write `data` to `path` atomically; returns the path."""
    with atomic_write(path, "wb") as handle:
        handle.write(data)
    return path


def _mode_for(path: str) -> int:
    """Keep an existing file's permissions; a new file gets the usual 0o666 less the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _sync_folder(folder: str) -> None:
    """fsync the folder so the rename itself survives a power cut (best effort: not every system allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
