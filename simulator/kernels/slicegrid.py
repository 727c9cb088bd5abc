"""A measured table's slice as a grid (kernels/grid.py), read from the Parquet table or from the grids kept on disk
(kernels/gridcache.py): the reading every family's lookup in kernels/measured.py goes through."""
from __future__ import annotations

from ..cache import stored
from . import gridcache
from .grid import Grid
from .tables import ENGINE, collection_files, matching, package_version, read_file, table_path, witnesses


@stored
def _grid(system: str, family: str, table: str, where: tuple, axes: tuple, log_axes: tuple,
          padded_axis: int | None = None, engine: str = ENGINE, version: str | None = None,
          smooth: bool = False) -> Grid | None:
    """The measured points of `table` matching `where` (column, value pairs) as a grid over `axes` (in the run's
    store, and kept on disk per installed version: kernels/gridcache.py, keyed by the engine, the version asked, the
    file read and `smooth`: the fit alone, for a table standing in for another kernel, Grid.from_frame)."""
    path = table_path(system, family, table, engine, version)
    if path is None:
        return None
    also = collection_files(system, family, table) if _tested(family, padded_axis) and not smooth else ()
    key = (system, family, table, where, axes, log_axes, padded_axis, engine, version) + (("smooth",) if smooth else ())
    entry = gridcache.entry(package_version(), path, key, also)
    grid = gridcache.load(entry)
    if grid is gridcache.MISSING:
        grid = grid_of_table(system, family, table, where, axes, log_axes, padded_axis, engine, version, smooth, path)
        gridcache.save(entry, grid)
    return grid


def _tested(family: str, padded_axis: int | None) -> bool:
    """Whether a grid's slice is tested against the GPU's other collections (a GEMM table along m: grid.repeats)."""
    return family == "gemm" and padded_axis is not None


def grid_of_table(system: str, family: str, table: str, where: tuple, axes: tuple, log_axes: tuple,
                  padded_axis: int | None = None, engine: str = ENGINE, version: str | None = None,
                  smooth: bool = False, path=None) -> Grid | None:
    """_grid read from the table itself (smooth: no other collection read, Grid.from_frame); path: the table's file
    where the caller has looked it up (_grid), else looked up here, once."""
    path = path or table_path(system, family, table, engine, version)
    if path is None:
        return None
    rows = matching(read_file(str(path), table), where)
    if rows is None or rows.empty:
        return None
    others = witnesses(system, family, table, where, path) if _tested(family, padded_axis) and not smooth else ()
    return Grid.from_frame(rows, list(axes), log_axes, padded_axis=padded_axis, witnesses=others, smooth=smooth)
