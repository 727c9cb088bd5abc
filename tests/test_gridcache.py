"""The measured grids kept on disk (kernels/gridcache.py): a grid read back is the one computed from the table, float
for float; the folder follows the installed version; an unwritable folder only costs the computation."""
import numpy as np
import pytest

from simulator.kernels import gridcache, measured, slicegrid

if measured.data_root() is None:
    pytest.skip("aiconfigurator-core is not installed (the measured extra)", allow_module_level=True)

GEMM = ("h100_sxm", "gemm", "gemm_perf", (("gemm_dtype", "bfloat16"),), ("m", "n", "k"), (True, False, False), 0)
NOTHING = ("h100_sxm", "gemm", "gemm_perf", (("gemm_dtype", "no_such_dtype"),), ("m", "n", "k"), (True, False, False))


def test_a_grid_read_back_is_the_computed_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path))
    computed = slicegrid._grid.__wrapped__(*GEMM)
    assert len(list(tmp_path.rglob("*.npz"))) == 1
    monkeypatch.setattr(slicegrid, "grid_of_table", lambda *a: pytest.fail("read the table again"))
    stored = slicegrid._grid.__wrapped__(*GEMM)
    assert stored is not computed and stored.log_axes == computed.log_axes
    assert all(np.array_equal(a, b) for a, b in zip(stored.axes, computed.axes))
    assert np.array_equal(stored.values, computed.values, equal_nan=True)
    point = (24.0, 4096.0, 4096.0)
    assert stored(point) == computed(point) is not None


def test_a_cold_grid_looks_its_tables_path_up_once(tmp_path, monkeypatch):
    """A GEMM slice read from its table (no grid on disk, a fresh store), tested against the GPU's other collections:
    one lookup of the table's file (tables.table_path) for the grid, its frame and its witnesses; the other
    collections read by the files they are (collection_files), not looked up again by engine and version."""
    from simulator.cache import Store, held
    from simulator.kernels import tables

    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path))
    asked = []
    lookup = tables.table_path

    def counted(*args):
        asked.append(args)
        return lookup(*args)
    monkeypatch.setattr(slicegrid, "table_path", counted)
    monkeypatch.setattr(tables, "table_path", counted)
    with held(Store()):
        grid = slicegrid._grid(*GEMM)
    assert grid is not None and len(slicegrid.collection_files("h100_sxm", "gemm", "gemm_perf")) > 1
    assert asked == [GEMM[:3] + ("sglang", None)]


def test_a_table_that_covers_nothing_is_stored_as_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path))
    assert slicegrid._grid.__wrapped__(*NOTHING) is None
    monkeypatch.setattr(slicegrid, "grid_of_table", lambda *a: pytest.fail("read the table again"))
    assert slicegrid._grid.__wrapped__(*NOTHING) is None


def test_another_version_or_table_file_is_another_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path))
    table = measured.table_path("h100_sxm", "gemm", "gemm_perf")
    first = gridcache.entry("0.12.0", table, GEMM)
    assert gridcache.entry("0.12.1", table, GEMM).parent != first.parent
    copy = tmp_path / "gemm_perf.parquet"
    copy.write_bytes(table.read_bytes()[:100])
    assert gridcache.entry("0.12.0", copy, GEMM) != first


def test_a_gemm_grid_is_another_entry_when_another_collection_changes(tmp_path, monkeypatch):
    """A GEMM slice's grid depends on the GPU's other collections (grid.repeats): reinstalling one is a new entry."""
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path / "cache"))
    other = tmp_path / "other_gemm_perf.parquet"
    other.write_bytes(b"x")
    monkeypatch.setattr(slicegrid, "collection_files", lambda *a: (other,))
    slicegrid._grid.__wrapped__(*GEMM)
    slicegrid._grid.__wrapped__(*GEMM)
    assert len(list((tmp_path / "cache").rglob("*.npz"))) == 1
    other.write_bytes(b"xy")  # the other collection, reinstalled
    slicegrid._grid.__wrapped__(*GEMM)
    assert len(list((tmp_path / "cache").rglob("*.npz"))) == 2


def test_an_unwritable_folder_computes_the_grid(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(blocker))
    assert slicegrid._grid.__wrapped__(*GEMM) is not None
    assert not list(tmp_path.rglob("*.npz"))


def test_a_damaged_entry_is_computed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path))
    computed = slicegrid._grid.__wrapped__(*GEMM)
    [stored] = tmp_path.rglob("*.npz")
    stored.write_bytes(stored.read_bytes()[:50])
    again = slicegrid._grid.__wrapped__(*GEMM)
    assert np.array_equal(again.values, computed.values, equal_nan=True)
    assert gridcache.load(stored) is not gridcache.MISSING  # written whole again


def test_a_grid_read_for_a_stand_in_is_another_entry(tmp_path, monkeypatch):
    """smooth (the tables standing in for another kernel: the fit alone) is part of the key: the A100's int4 GEMV,
    whose m = 1 rows are held out unless smooth, is kept twice and each read back as computed."""
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(slicegrid, "collection_files", lambda *a: ())  # the key alone tells them apart
    int4 = ("a100_sxm", "gemm", "gemm_perf", (("gemm_dtype", "int4_wo"),), ("m", "n", "k"), (True, False, False), 0,
            "trtllm", "1.0.0")
    held, smooth = slicegrid._grid.__wrapped__(*int4), slicegrid._grid.__wrapped__(*int4, smooth=True)
    assert len(list(tmp_path.rglob("*.npz"))) == 2
    assert not np.array_equal(held.values, smooth.values, equal_nan=True)
    monkeypatch.setattr(slicegrid, "grid_of_table", lambda *a: pytest.fail("read the table again"))
    assert np.array_equal(slicegrid._grid.__wrapped__(*int4, smooth=True).values, smooth.values, equal_nan=True)
    assert np.array_equal(slicegrid._grid.__wrapped__(*int4).values, held.values, equal_nan=True)
