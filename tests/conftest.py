"""Shared fixtures: paths to the shipped scenarios, a short workload for fast tests."""
from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Property tests search the same examples on every run (derandomize), so that CI's verdict is the one a developer
# sees; SPECSIM_HYPOTHESIS_SEARCH=1 lets Hypothesis search randomly, to look for new counterexamples.
settings.register_profile("specsim", derandomize=True, database=None)
if not os.environ.get("SPECSIM_HYPOTHESIS_SEARCH"):
    settings.load_profile("specsim")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = os.path.join(ROOT, "scenarios")
TOPOLOGIES = os.path.join(ROOT, "topologies")


@pytest.fixture(scope="session", autouse=True)
def _kernel_grid_cache(tmp_path_factory):
    """The suite's measured grids are cached in a folder of its own (kernels/gridcache.py), not the user's: it starts
    cold and leaves nothing behind."""
    kept = os.environ.get("SPECSIM_CACHE_DIR")
    os.environ["SPECSIM_CACHE_DIR"] = str(tmp_path_factory.mktemp("specsim-cache"))
    yield
    if kept is None:
        os.environ.pop("SPECSIM_CACHE_DIR", None)
    else:
        os.environ["SPECSIM_CACHE_DIR"] = kept


def scenario_path(name: str) -> str:
    return os.path.join(SCENARIOS, name)


def topology_path(name: str) -> str:
    return os.path.join(TOPOLOGIES, name)


def monotone_fit(by_size, size) -> float:
    """The non-decreasing least-squares fit to a table's mean times by size (a pandas Series indexed by the sizes
    measured), at one measured size, by the min-max formula of isotonic regression: the largest, over runs starting at
    or below it, of the least mean of a run from there to a size at or above it (written apart from the
    pool-adjacent-violators loop of kernels/grid.py that it checks)."""
    values = by_size.sort_index().to_numpy(dtype=float)
    i = list(by_size.sort_index().index).index(size)
    return max(min(values[a:b + 1].mean() for b in range(i, len(values))) for a in range(i + 1))


def load_tool(name: str):
    """A script in tools/ (no package) loaded as a module, without running its main; what it imports at its top
    (not PyTorch, which the tools import only inside their runs) is imported with it."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SAMPLE_ENTRIES = ("sampling.samples", "sampling.by_plan", "sampling.durations", "sampling.draws", "sampling.hypercube",
                  "sampling.launch", "sampling.last_ready", "sampling.rows", "sampling.rows_all",
                  "sampling.rows_seen", "sampling.picked", "costs.step_table",
                  "costs.pair", "costs.mean", "costs.sparse_row", "costs.sparse_rows")


def clear_sample_caches() -> None:
    """Forget every stored pass sample, duration column, draw, hypercube, launch, ready time, step table, pair,
    mean and sparse row (timing.sampling, timing.costs) in the held store, so the next run starts cold."""
    from simulator.cache import current

    current().clear(*SAMPLE_ENTRIES)


@pytest.fixture(scope="module", autouse=True)
def module_store():
    """Each test module holds one store (simulator.cache), as a sweep worker does across its points: what equal
    runs share is computed once. A test that needs a cold store holds its own (cache.held(Store())). Per module,
    not per session: a session's store grew to ~86K entries and ~1M objects that every full collection of the
    cycle collector walked (each sweep starts with one: 0.85 s apiece late in the suite, 34 s of the suite's CPU)."""
    from simulator.cache import Store, held

    with held(Store()) as store:
        yield store


SHORT = {"workload__requests": 1, "workload__output_tokens": 256}


@pytest.fixture
def eagle3() -> str:
    return scenario_path("pcie8_eagle3.yaml")


@pytest.fixture
def baseline() -> str:
    return scenario_path("pcie8_baseline.yaml")
