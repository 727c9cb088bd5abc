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


def clear_sample_caches() -> None:
    """Forget every memoised pass sample, duration column, draw, hypercube, launch, step table, random block and lone
    request's walks (timing.sampling, timing.costs, timing.streams, serving.walking), so the next run starts cold."""
    from simulator.timing import costs, sampling, streams
    from simulator.serving import walking

    for cache in (sampling._SAMPLE_CACHE, sampling._BY_PLAN, sampling._DURATIONS, sampling._DRAWS, sampling._HYPERCUBES,
                  sampling._LAUNCHES, sampling._READY, sampling._ROWS, sampling._PICKED, costs._STEP_TABLES, streams._BLOCKS,
                  walking._ALONE):
        cache.clear()


SHORT = {"workload__requests": 1, "workload__output_tokens": 256}


@pytest.fixture
def eagle3() -> str:
    return scenario_path("pcie8_eagle3.yaml")


@pytest.fixture
def baseline() -> str:
    return scenario_path("pcie8_baseline.yaml")
