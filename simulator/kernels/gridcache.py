"""A compact cache on disk of the measured grids a scenario reads (kernels/slicegrid.py `_grid`): each grid's axes
and values as a small .npz in the user's cache folder, so a warm run reads a few kilobytes with numpy instead of
importing pandas and pyarrow and reading the Parquet tables (~1 s of CPU and ~180 MB).

Built once per installed version: the folder is named by aiconfigurator-core's version and a digest of the code
that turns a table into a grid (slicegrid.py, measured.py and measured_attention.py, tables.py, grid.py), and each
entry's key holds its table file's size and modification time (and those of the other collections a GEMM grid is
tested against), so a reinstalled database or a changed reader never reads a stale grid. The folder is
$SPECSIM_CACHE_DIR, else $XDG_CACHE_HOME/specsim, else ~/.cache/specsim; where it cannot be written the grid is
computed every time, as before.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile
import zipfile

import numpy as np

from .grid import Grid

MISSING = object()  # no entry: compute the grid


def cache_root() -> pathlib.Path:
    base = os.environ.get("SPECSIM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "specsim")
    return pathlib.Path(base)


def folder(package_version: str) -> pathlib.Path:
    here = pathlib.Path(__file__).parent
    readers = ("slicegrid.py", "measured.py", "measured_attention.py", "tables.py", "grid.py", "gridcache.py")
    code = hashlib.sha256(b"".join((here / name).read_bytes() for name in readers))
    return cache_root() / "kernel-grids" / f"aiconfigurator-core-{package_version}-{code.hexdigest()[:12]}"


def entry(package_version: str, table: pathlib.Path | None, key: tuple, also: tuple = ()) -> pathlib.Path:
    """The file of one grid: its arguments and the size and modification time of its table file and of the other
    files it reads (`also`: the other collections a GEMM slice is tested against, kernels/tables.py witnesses)."""
    def stamp(path):
        stat = path.stat() if path is not None else None
        return str(path), stat and (stat.st_size, stat.st_mtime_ns)
    text = repr((key, stamp(table), tuple(stamp(p) for p in also)))
    return folder(package_version) / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.npz"


def load(path: pathlib.Path):
    """The grid stored at path (None where the table covers nothing), or MISSING."""
    try:
        with np.load(path) as data:
            if not bool(data["covered"]):
                return None
            axes = [data[f"axis{i}"] for i in range(int(data["num_axes"]))]
            return Grid(axes, data["values"], tuple(bool(x) for x in data["log_axes"]))
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):  # absent, or written by something else
        return MISSING


def save(path: pathlib.Path, grid: Grid | None) -> None:
    """Written whole (a temporary file renamed), or not at all where the folder cannot be written."""
    arrays = {"covered": np.array(grid is not None)}
    if grid is not None:
        arrays.update({f"axis{i}": a for i, a in enumerate(grid.axes)}, num_axes=np.array(len(grid.axes)),
                      values=grid.values, log_axes=np.array(grid.log_axes, dtype=bool))
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as out:
            temporary = out.name
            np.savez(out, **arrays)
        os.replace(temporary, path)
    except OSError:
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)
